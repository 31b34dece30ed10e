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
// hex> on its lease; the oldest key holds the lock. A waiter waits for the
// deletions of the keys ahead of it, from the current revision. While its
// session's one deletion watch of the namespace runs (the session holds a
// key there, or has held there more than once and its last hold ended less
// than 15 s ago), the waiter follows that watch and opens none of its own;
// otherwise it watches the key just ahead of it. The layout is that of
// etcd's client/v3/concurrency, so a concurrency.Mutex or `etcdctl lock`
// on the same prefix contends with this one correctly; this package does
// not call concurrency.Mutex.
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
//   - A deleted key or revoked lease ends the Context in the step that
//     receives the deletion (cause ErrKeyGone), before baton asks etcd
//     which of the two it was; so with equal network delay the holder
//     hears of it before a waiter woken by the same event returns from
//     Lock, which confirms with one more read. Unlock's error, the logs and
//     the metrics then say ErrKeyDeleted or ErrLeaseExpired.
//   - Unlock deletes only the key of this acquisition (a transaction
//     guarded by its CreateRevision), so a stale handle never releases a
//     later holder's lock.
//   - Lock and TryLock leave no key behind on error, and return within a
//     round trip after ctx ends, even when etcd is unreachable (the key is
//     then deleted in the background, or goes with the lease).
//   - Goroutines that lock the same name through one Mutex, or Mutexes
//     sharing one lease (a session.Session or one etcd
//     *concurrency.Session), exclude each other (etcd alone would let them
//     share one key), and a key still being deleted after a loss is never
//     adopted by a later Lock. Every delete is guarded by the key's
//     CreateRevision, so cleanup never deletes another holder's key.
//   - etcd's refusals (permission denied, authentication failed, invalid
//     request) are returned by Lock and TryLock at once; nothing retries
//     them in the background, and they leave the Mutex usable.
//   - After Close returns, no goroutine of the Mutex runs, and its metric
//     series are deleted unless another open Mutex records under the same
//     label. Close returns within a few seconds even when etcd is
//     unreachable; on a caller's etcd session, a key it could not delete
//     then is deleted once etcd answers, while that session lives.
//   - Observe sends one state per etcd revision: the outcome of a
//     transaction or of a prefix delete, never an intermediate one.
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
//   - That tokens of different names differ: Locks of several names taken
//     at once on one session may go to etcd as one transaction and get the
//     same token. A token orders the holders of one name only.
//   - That an admin's delete or revoke reaches the holder before everyone
//     else: etcd tells every watcher at once, and the holder can only be
//     first by a round trip. Fencing covers that window.
//
// # Metrics
//
// Series are labelled namespace (bounded by your namespaces), name and,
// where they fit, result (acquired, locked, canceled, error) or reason
// (lease_expired, key_deleted, renewal_failed, validity_expired,
// session_closed). The name label is the WithMetricLabel value, or the
// lock's name if the Registerer carries it already or carries fewer than
// WithMetricLabelLimit names (default 100; a name keeps its place for the
// Registerer's life); a Mutex opened past them records under "(other)",
// counted in baton_metric_labels_collapsed_total, so a process that locks
// a name per entity cannot grow its series without bound. Give per-entity
// locks one WithMetricLabel per kind of entity, so that "(other)" stays
// empty and the fixed names keep their own:
//
//	m, err := mutex.New(cli, "order-"+id, mutex.WithMetricLabel("order"), mutex.WithSession(s))
//
// Close deletes the Mutex's series unless another open primitive records
// under the same label.
package mutex
