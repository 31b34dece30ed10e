// Package fencing is the check a protected resource runs so that a holder
// whose lock or leadership has passed on cannot write any more.
//
// Every acquisition in packages mutex and election carries a Token: the
// etcd CreateRevision of the holder's key, strictly increasing across the
// successive holders of one lock or election. The resource keeps, per
// protected resource, the highest token it has admitted, and rejects a
// lower one:
//
//	if err := guard.Admit(ctx, "ledger", lock.Token()); err != nil {
//		return err // errors.Is(err, fencing.ErrStale)
//	}
//
// # Guarantees
//
//   - A Guard admits a token greater than or equal to the highest it has
//     admitted for the resource (one holder writes many times), and
//     rejects a lower one with a *StaleError that wraps ErrStale.
//   - MemoryGuard is linearizable within one process.
//
// What is not guaranteed:
//
//   - Safety when the check and the write are not atomic: admit and write
//     in one critical section of the resource (one mutex, one transaction),
//     or a holder can pass the check and be overtaken before it writes.
//   - Anything across processes with MemoryGuard: its high-water marks
//     live in memory and are lost on restart.
//   - That an equal token comes from the same holder: tokens identify
//     acquisitions, so do not reuse one outside its holder.
package fencing
