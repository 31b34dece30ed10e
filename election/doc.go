// Package election is leader election on etcd, for a singleton service
// (scheduler, cron runner, controller) that must run on exactly one
// replica at a time.
//
//	e, err := election.New(cli, "scheduler", election.WithTTL(10*time.Second))
//	err = e.Run(ctx, hostname, func(ctx context.Context, t *election.Term) error {
//		// lead until ctx ends; pass t.Token() to what you write to
//	})
//
// Candidates put a key /<namespace>/v1/election/<escaped name>/<lease id
// hex> holding their value; the oldest key leads. The layout is that of
// etcd's client/v3/concurrency, so concurrency.Election and `etcdctl
// elect` interoperate with it.
//
// # Guarantees
//
//   - At most one candidate's key is the oldest at any etcd revision, and
//     Campaign returns only after reading, at one revision, that no older
//     key exists and its own key still exists with its original
//     CreateRevision.
//   - Each term carries a fencing token, the CreateRevision of the
//     leader's key, strictly greater than every earlier leader's. Proclaim
//     does not change it.
//   - A Term's Context ends before the server can expire the lease (see
//     package mutex for the rule), when the key is deleted or the lease
//     revoked, when a fenced transaction finds the key gone, and on Resign
//     or Close; context.Cause says which.
//   - Resign deletes only this term's key; Run resigns when its ctx ends,
//     so the next candidate leads within a round trip, not a TTL.
//   - A deleted key or revoked lease ends the Term's Context in the step
//     that receives the deletion (cause ErrKeyGone); Resign's error, the
//     logs and the metrics then tell ErrKeyDeleted from ErrLeaseExpired.
//   - Observe sends the current state first, then every change it sees,
//     in strictly increasing revision, and converges on the current state
//     after compaction or a broken watch. Its channel closes when ctx ends,
//     on Close, or after a value with Err set when etcd refuses the read
//     for good.
//   - Campaign and Run return etcd's refusals (permission denied,
//     authentication failed, invalid request) at once; Run retries only
//     errors that pass.
//   - The leader gauge is 1 exactly while a term lasts, also for a term
//     lost before Campaign returned; with a label shared by several
//     Elections it counts their terms. Close deletes the Election's series
//     unless another open Election records under the same label.
//   - One lease is one candidate: a Campaign through a lease that already
//     has this election's key (another Election on the same session or
//     etcd session, as in etcd's own tests) takes the key over with its
//     value, and the earlier Term ends (ErrReplaced) before it returns, so
//     there is never more than one live Term per key.
//   - Run returns ErrSessionClosed once an etcd session given to
//     WithSession (or wrapped by session.Wrap) has ended: it cannot be
//     replaced.
//   - After Close returns, no goroutine of the Election runs (Observe's
//     included).
//
// What is not guaranteed:
//
//   - That the old leader has stopped when the new one starts. A paused
//     process can wake up and act on a term that has ended; the resource
//     it writes to must reject its stale token (package fencing, Term.Txn).
//   - That Observe reports every intermediate state: after a broken watch
//     it may skip states that came and went.
//   - Leadership while etcd has no quorum; Run waits and leads again once
//     etcd recovers.
package election
