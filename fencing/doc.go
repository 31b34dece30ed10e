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
//   - EtcdGuard keeps its marks in etcd (/<namespace>/v1/fence/<escaped
//     resource>, no lease) and raises them by compare-and-swap, so it is
//     linearizable across processes; Write commits the holder's ownership
//     compare, the fence and the caller's operations in one transaction,
//     all or nothing.
//   - SQLGuard checks inside the caller's transaction and keeps the
//     resource's row locked until it ends: a write whose token was stale
//     at commit time never commits (PostgreSQL, SQLite).
//   - Middleware answers 409 with a JSON body for a stale token and 400
//     for a missing or malformed one, before the handler runs.
//   - Every rejection is counted in baton_fencing_rejections_total
//     {resource} and logged at Warn with resource, token and highest.
//     The resource label carries at most WithMetricLabelLimit values per
//     Registerer (default 100); rejections for resources past them are
//     counted under resource="(other)".
//   - Inside a trace, every check is an OpenTelemetry span ("fencing
//     admit", "fencing write") of the caller's trace, with its outcome
//     and the high-water mark (docs/telemetry.md), through
//     WithTracerProvider or the global provider. Middleware continues the
//     caller's trace from the request's headers, and Transport sends it,
//     so a rejected zombie write shows in the zombie's trace.
//
// What is not guaranteed:
//
//   - Safety when the check and the write are not atomic: admit and write
//     in one critical section of the resource (one mutex, one transaction),
//     or a holder can pass the check and be overtaken before it writes.
//   - Anything across processes with MemoryGuard: its high-water marks
//     live in memory and are lost on restart.
//   - That a request Middleware admitted is still current when its handler
//     writes: check again in the write's own transaction.
//   - Progress under heavy contention for one resource's mark: EtcdGuard
//     gives up after MaxCASAttempts with ErrContended.
//   - A span for a check made outside any trace: a check alone says
//     nothing, and an untraced caller pays nothing for tracing.
//   - That an equal token comes from the same holder: tokens identify
//     acquisitions, so do not reuse one outside its holder.
package fencing
