// Package session is an etcd lease that any number of baton primitives
// share: one renewal per TTL/3 keeps every lock held through it
// alive, however many there are.
//
//	s, err := session.New(cli, session.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer s.Close()
//	a, _ := mutex.New(cli, "a", mutex.WithSession(s))
//	b, _ := election.New(cli, "b", election.WithSession(s))
//
// A Mutex or Election given no session makes its own, with the options
// given to it. Session-wide settings (TTL, maximum TTL, safety margin,
// maximum keys held, logger, registerer and its metric label limit) live
// on the session: a Mutex or Election on a shared session that is given
// one of them with another value is refused by its New, with an error
// naming both values.
//
// # Guarantees
//
//   - The lease is granted on first use, with a bounded wait, and replaced
//     by a new one after it is lost; calls waiting for a grant return when
//     their own ctx ends, whatever the grant is doing.
//   - Every hold's Context ends at the latest at the send time of the last
//     acknowledged renewal + TTL − margin on the monotonic clock, and at
//     once when two renewals in a row fail or etcd says the lease is gone.
//   - Several goroutines or Mutexes locking the same name through one
//     session exclude each other (etcd alone would let them share a key),
//     and a key still being deleted after a loss is never adopted.
//   - Close revokes the lease, so every key on it goes at once, and waits
//     for every goroutine the session started.
//
// Not guaranteed: that a holder paused past its lease stops writing — no
// lease can; the fencing token is what the protected resource checks.
//
// # One session per lease
//
// However a lease reaches baton — New, Wrap(cs), or an etcd
// *concurrency.Session given to a primitive's WithSession — every primitive
// of this process on that lease shares one session: one watchdog, one
// deletion watch per namespace, one set of key reservations. So the same
// name through one lease always excludes (an election's second Campaign
// takes the key over, ending the first Term with ErrReplaced, as etcd's
// Campaign does), and a held lock costs under 1 KiB of client heap and no
// goroutine of its own however the lease was made. For an etcd session this
// takes a small registry from the etcd session to its baton session, whose
// entry lives from the first primitive given it to the last one closed.
// Cleanup belongs to the lease's owner: keys etcd could not delete on a
// caller's lease are deleted in the background until etcd answers or that
// lease ends; Close never waits for them more than a few seconds.
//
// # Handles
//
// A mutex's Lock, an election's Term, a semaphore's Permit and a read/write
// lock's Lock share these methods:
//
//   - Token: the fencing token, the CreateRevision of the holder's key,
//     strictly greater than every earlier holder's of the same lock or
//     election. Pass it to what you write to, and have it reject lower ones.
//   - Key, Lease, TTL, Acquired: the holder's key, the lease it is attached
//     to and the TTL the server granted, and when this process acquired it.
//   - Deadline: the validity deadline; the Context ends by then unless a
//     renewal is acknowledged first.
//   - Context and Done: cancelled when ownership may be gone, before the
//     server can expire the lease, and on release or Close. context.Cause
//     says why: ErrReleased, or ErrLost with a reason (ErrKeyGone at once
//     when the key is deleted; the release's error, the logs and the
//     metrics then tell ErrKeyDeleted from ErrLeaseExpired).
//   - Txn: a transaction that commits only while the key is held (the
//     caller's If, Then and Else nested under IsOwner); once ownership is
//     gone Commit returns the package's ErrNotHeld (ErrNotLeader), applies
//     nothing and ends the Context. It is not retried.
//   - IsOwner: the comparison that holds while the key exists with its
//     original CreateRevision.
package session
