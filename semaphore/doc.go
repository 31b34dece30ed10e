// Package semaphore is a distributed counting semaphore on etcd: at most N
// holders at once across processes, such as "at most 3 workers run the
// export" or "at most 8 connections to the legacy database".
//
//	s, err := semaphore.New(cli, "exports", 3)
//	p, err := s.Acquire(ctx)
//	defer p.Release(context.Background())
//	// work under p.Context(); hand p.Token() to what you write to
//
// Each acquisition puts its own key /<namespace>/v1/semaphore/<escaped
// name>/<lease id hex>.p<n> on its lease; the Limit oldest keys hold a
// permit. A waiter watches the semaphore's deletions and holds once fewer
// than Limit keys older than its own remain. The limit is stored at
// /<namespace>/v1/semaphore/<escaped name> (outside the contenders'
// prefix) by the first Acquire; a Semaphore given another limit is
// refused with ErrLimitMismatch naming both. The stored limit outlives
// every holder: to change it, delete that key while no one uses the
// semaphore.
//
// # Guarantees
//
//   - At most Limit keys hold at any etcd revision: holding is decided from
//     the queue's CreateRevision order, which Raft makes the same for
//     everyone. Clients that disagree on the limit cannot both hold, as
//     one of them is refused before it queues.
//   - Waiters are served in arrival order (the CreateRevision of their
//     key): a key never holds while an older key waits.
//   - A permit's fencing token, the CreateRevision of its key, is higher
//     than that of every permit of the semaphore granted before it.
//   - A Permit's Context ends before the server can expire its lease, and
//     at once when two renewals in a row fail, its key is deleted, its
//     lease is revoked, a fenced transaction finds it gone, and on Release
//     or Close, exactly as a mutex Lock's does (see package mutex);
//     context.Cause says which.
//   - Release deletes only this permit's key (a transaction guarded by its
//     CreateRevision). Acquire leaves no key behind on error, and returns
//     within a round trip after ctx ends even when etcd is unreachable.
//   - One Semaphore, or several on one session.Session, may hold several
//     permits at once: each acquisition has a key of its own.
//   - After Close returns, no goroutine of the Semaphore runs.
//
// What is not guaranteed:
//
//   - That a holder stops in time: a paused process can outlive its
//     permit. Fencing covers that, but a semaphore's tokens are not one
//     sequence of owners: up to Limit holders are current at once, so a
//     resource that keeps only the highest token seen would reject the
//     older current holders. Guard per slot instead (a high-water mark per
//     resource that one holder at a time writes to), or, for writes to
//     etcd, use Permit.Txn, which applies only while the permit's key
//     exists. docs/primitives.md tells the fencing story.
//   - Progress while etcd has no quorum, or fairness beyond arrival order.
//   - Cheap waiting under a large limit: a waiter watches the limit keys
//     just ahead of it, so a release wakes up to limit waiters (small
//     events; a woken waiter reads its queue again), which suits limits
//     in the tens.
//   - That the stored limit is re-read: each Semaphore compares it once,
//     at its first Acquire.
//
// # Metrics
//
// The metrics of package mutex, with the name label "semaphore:<name>"
// unless WithMetricLabel says otherwise, or "(other)" past the
// Registerer's WithMetricLabelLimit names, as package mutex says.
package semaphore
