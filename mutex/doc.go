// Package mutex is a distributed lock on etcd for low-frequency critical
// sections across processes: a nightly report, a migration, a payment
// batch.
//
//	m, err := mutex.New(cli, "nightly-report", mutex.WithTTL(30*time.Second))
//	lock, err := m.Lock(ctx)
//	defer lock.Unlock(context.Background())
//	// work under lock.Context(); hand lock.Token() to what you write to
//
// Each contender puts a key /<namespace>/v1/lock/<escaped name>/<lease id
// hex> on its lease; the oldest key holds the lock, and each waiter watches
// only the key just ahead of it. The layout is that of etcd's
// client/v3/concurrency, so a concurrency.Mutex or `etcdctl lock` on the
// same prefix contends with this one correctly.
//
// # Guarantees
//
//   - Mutual exclusion rests on etcd: a lease and revisions agreed by Raft.
//     At most one key is the oldest at any revision.
//   - Every acquisition carries a fencing token, the CreateRevision of the
//     holder's key, strictly greater than every earlier holder's of the
//     same lock. It is cluster-wide and survives restarts of etcd.
//   - A Lock's Context ends before the server can expire the lease: at the
//     latest at the send time of the last renewal the server acknowledged
//     plus the TTL it granted minus the safety margin, on the monotonic
//     clock; and at once when two renewals in a row fail, when the lease is
//     revoked, when the key is deleted by anyone else, when a fenced
//     transaction finds the key gone, and on Unlock or Close.
//     context.Cause says which (ErrLost with a reason, or ErrReleased).
//   - Unlock deletes only the key of this acquisition (a transaction
//     guarded by its CreateRevision), so a stale handle never releases a
//     later holder's lock.
//   - Lock and TryLock leave no key behind on error, and return within a
//     round trip after ctx ends, even when etcd is unreachable (the key is
//     then deleted in the background, or goes with the lease).
//   - Goroutines that lock the same name through one session exclude each
//     other (etcd alone would let them share one key).
//
// What is not guaranteed:
//
//   - That a holder stops in time. A process can be paused (GC, SIGSTOP, a
//     VM stall) after checking its Context and before writing; no lock
//     service can prevent that. Safety for data comes from the resource
//     rejecting stale tokens: see package fencing, and Lock.Txn for writes
//     to etcd itself.
//   - That the Context ends in time if the client's clock runs slower than
//     the server's by more than the safety margin allows (TTL/5 by
//     default). Fencing covers that too.
//   - Fairness beyond first come, first served, or progress while etcd has
//     no quorum.
//   - That waiters see every holder: a waiter only learns that those ahead
//     of it are gone.
package mutex
