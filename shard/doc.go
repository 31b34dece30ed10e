// Package shard spreads the N shards of a group of work over the live
// members that run it: each shard owned by exactly one member at a time,
// spread evenly, moved as little as possible when members come and go,
// drained before it moves, and fenced by a token of its own.
//
//	g, err := shard.New(cli, "ingest", 256, shard.WithTTL(10*time.Second))
//	if err != nil { return err }
//	defer g.Close()
//	err = g.Run(ctx, hostname, func(ctx context.Context, s *shard.Shard) error {
//		// own shard s.ID() until ctx ends; pass s.Token() to what you write
//		return process(ctx, s.ID(), s.Token())
//	})
//
// Each shard is held as a lock: one key per shard and contender, on the
// member's session lease, as a mutex's (its fencing token is that key's
// CreateRevision). A member is one key on the same lease, carrying the
// group's shard count. Who should own what is a function of the live
// members (in the order they joined) and of the current owners, which
// every member computes alike from what it reads: each member's quota is
// floor(N/M), the oldest N mod M members one more; a member keeps the
// shards it owns, lowest IDs first, up to its quota; its excess and the
// shards without a live owner go, lowest ID first, to the oldest members
// under their quota. The assignment only decides who queues for which
// shard and who gives which up; the lock decides who owns it, so two
// members never own a shard at once whatever each believes.
//
// A member that must give a shard up ends the shard's Context with
// ErrMoved, waits for fn to return (at most the drain timeout,
// WithDrainTimeout), and releases the key. The new owner queued on the
// shard as soon as it saw the change, so the release hands the shard over
// in one round trip; no one waits for a lease to expire but after a crash.
//
// Keys, under /<namespace>/v1/shard/<escaped group>/: m/<escaped member>
// (the member, valued {"count":N,"identity":…}) and s/<id, 5 digits>/<lease
// id hex> (a shard's contenders, valued the member's name). docs/shards.md
// describes the design and compares it with other assignors.
//
// # Guarantees
//
//   - One owner. At every etcd revision a shard has at most one owner (the
//     oldest key of its queue), and each new owner's Token is strictly
//     greater than every earlier owner's of that shard. Give the token to
//     the resource the shard's work writes to (package fencing): a member
//     paused past its lease (GC, SIGSTOP, a VM stall) is then rejected.
//   - The old owner knows first. A shard's Context ends before any other
//     member can own it: with ErrMoved on a move (the key is deleted only
//     after), with an error wrapping ErrLost on a possible loss of the
//     lease (at the latest at the last acknowledged renewal's send time +
//     TTL − margin, before the server can expire it, as for every baton
//     hold), with ErrReleased when Run's ctx ends or the Group is closed.
//   - Balanced. Once membership has been stable long enough for the moves
//     to finish (a round trip per move, plus the drain of the work moved),
//     each live member owns floor(N/M) or ceil(N/M) shards and every shard
//     is owned.
//   - Sticky. From a balanced group, a member joining moves at most
//     ceil(N/(M+1)) shards, all to the new member; a member leaving or
//     lost moves only its own shards. No shard moves between two members
//     that both stay.
//   - Drained. A shard that moves from a live member is released by it
//     only after fn returned or the drain timeout passed, and only then
//     taken by the new owner, which queued on it before: no TTL wait for a
//     graceful move or a graceful leave (Run deletes the member's key
//     first, so the others queue on its shards while they drain).
//   - Bad input refused, nothing written: New refuses a count out of 1 to
//     MaxCount and a bad group name (ErrInvalid); Run refuses a bad member
//     name (ErrInvalid), a group whose live members use another count
//     (ErrCountMismatch), and a member name live on another lease
//     (ErrDuplicateMember), before it writes any key.
//   - Cost independent of N at rest. A member at steady state sends its
//     session's renewals (one per TTL/3 for all its shards) and keeps one
//     watch of the group (beside the session's namespace watch, which all
//     of a session's primitives share): no request per shard per second.
//
// Not guaranteed:
//
//   - That fn has stopped when another member owns the shard: a fn that
//     ignores its Context keeps running after the drain timeout released
//     its shard (Run waits for it before it returns, and never takes that
//     shard again meanwhile). Its Txn fails once the key is gone, and the
//     token fences its other writes.
//   - Balance while members keep coming and going: the assignment follows
//     what each member read, and members that read different revisions may
//     queue for the same shard; the oldest key wins, the other gives up
//     when its view catches up. Moves then can exceed the bounds above;
//     safety does not depend on it.
//   - Fairness of which shards a member gets: the lowest IDs of its excess
//     stay, the highest move; the oldest members carry the remainder.
//   - That a member crashed without releasing is replaced sooner than its
//     lease's TTL: that is the price of not trusting a silent member.
//   - Shards of one group with different counts: the count is checked at
//     join against the live members only; stop every member to change it.
//
// Metrics (WithRegisterer): baton_shard_owned{namespace,name,member},
// baton_shard_moves_total{namespace,name,reason} (join, leave, loss,
// counted by the new owner), baton_shard_unowned_duration_seconds (from the
// old owner's key's deletion, as the new owner saw it, to its fn's start),
// and the session's renewal failures; the name label is "shard:<group>"
// (or WithMetricLabel's), "(other)" past the Registerer's
// WithMetricLabelLimit names. Each shard's wait, hold and release
// is a span, as a mutex's, named for the group and the shard
// ("ingest/17").
package shard
