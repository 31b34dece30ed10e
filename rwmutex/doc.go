// Package rwmutex is a distributed read/write lock on etcd: any number of
// readers at once, or one writer alone, such as readers of a shared
// dataset and the job that rebuilds it.
//
//	rw, err := rwmutex.New(cli, "catalog")
//	r, err := rw.RLock(ctx)            // shared
//	defer r.Unlock(context.Background())
//	w, err := rw.Lock(ctx)             // exclusive
//
// Readers and writers queue under one prefix,
// /<namespace>/v1/rwlock/<escaped name>/, each acquisition with a key of
// its own: <lease id hex>.r<n> for a reader, <lease id hex>.w<n> for a
// writer. The order of the queue is the keys' CreateRevision. A writer
// holds when it is the oldest key, and waits for the keys ahead of it as a
// mutex does; a reader holds when no older writer remains, and waits for
// the queue's deletions. Either follows its session's deletion watch of
// the namespace while that runs (as a mutex waiter does), and otherwise
// watches on its own: a writer the key just ahead, a reader the queue.
//
// # Guarantees
//
//   - No reader holds while a writer holds, and no two writers hold, at
//     any etcd revision: holding is decided from the queue's order, which
//     Raft makes the same for everyone. (etcd's recipes RWMutex can let a
//     reader in beside a writer; this one decides from one ordered queue.)
//   - Arrival order is kept: a reader that comes after a waiting writer
//     waits for it, so a stream of readers cannot starve a writer, and a
//     writer waits only for those that came before it.
//   - A writer's fencing token, the CreateRevision of its key, is higher
//     than every token held before it.
//   - A Lock's Context ends before the server can expire its lease, and at
//     once when two renewals in a row fail, its key is deleted, its lease
//     is revoked, a fenced transaction finds it gone, and on Unlock or
//     Close, exactly as a mutex Lock's does; context.Cause says which.
//   - Unlock deletes only this acquisition's key (a transaction guarded by
//     its CreateRevision). The locking calls leave no key behind on
//     error, and return within a round trip after ctx ends even when etcd
//     is unreachable.
//   - After Close returns, no goroutine of the RWMutex runs. Close takes
//     one bound of a few seconds however many locks it holds, even when
//     etcd is unreachable.
//
// What is not guaranteed:
//
//   - That a holder stops in time: fencing covers a paused process. A
//     resource guarded by one high-water mark accepts a writer's token
//     over every earlier one; readers hold together, with tokens in any
//     order between two writers, so a guard for readers accepts any token
//     not lower than the last writer's (a reader never writes what a
//     writer must not lose). docs/primitives.md tells the story.
//   - Upgrading a read lock to a write lock: a process that holds a read
//     lock and calls Lock waits for itself forever; release first.
//   - Recursive read locking: arrival order is kept, so a reader that holds
//     a read lock and calls RLock again waits behind any writer queued
//     since, and that writer waits for the first read lock: a deadlock, as
//     with sync.RWMutex. Use the read lock already held.
//   - Cheap waiting for thousands of readers behind a writer: each release
//     wakes every waiting reader's watch.
//
// # Metrics
//
// The metrics of package mutex, with the name label "rwmutex:<name>"
// unless WithMetricLabel says otherwise, or "(other)" past the
// Registerer's WithMetricLabelLimit names, as package mutex says.
package rwmutex
