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
// That is the default strategy, Oldest. With WithStrategy(Preferred) the
// best candidate leads instead — by WithPriority, then the lowest
// WithVersion (a rolling upgrade keeps the old version leading until no
// replica runs it), then age — and leadership moves without a moment
// without a leader: a better candidate asks the leader to end its term
// (Term.EndRequested) and preempts it after its WithHandoverDeadline;
// Resign and Term.Transfer hand over to a named or the best candidate in
// one transaction. Under Preferred only the leader has a key in the
// election's prefix; every candidate writes a record of its value and
// attributes beside it (Candidates shows them), so etcd's observers still
// see the leader and its plain value.
//
//	e, _ := election.New(cli, "scheduler", election.WithStrategy(election.Preferred),
//		election.WithVersion(buildVersion))
//	err = e.Run(ctx, hostname, func(ctx context.Context, t *election.Term) error {
//		select {
//		case <-ctx.Done(): // lost, or shutting down
//		case <-t.EndRequested(): // a better candidate: Run hands over when this returns
//		}
//		return nil
//	})
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
//     Elections (a WithMetricLabel, or "(other)", where Elections opened
//     past the Registerer's WithMetricLabelLimit names record) it is 1
//     while any of their terms lasts. Close deletes the Election's series
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
//     and OnStoppedLeading callbacks included).
//   - Under Preferred, etcd never shows two keys in the election's prefix:
//     a leader's key is created only on an empty prefix, or by a hand-over
//     in the transaction that deletes the only other key. A hand-over
//     leaves no revision without a leader, and no third candidate can lead
//     in between. Each new leader's token is a fresh CreateRevision,
//     greater than every earlier leader's, also for a candidate that waited
//     long.
//   - Transfer to a candidate that is not live returns ErrNoCandidate and
//     leaves the term untouched; Transfer and hand-overs end the old Term's
//     Context (ErrTransferred, ErrReleased) before the successor's key is
//     written.
//   - Under Oldest, Transfer to any live candidate keeps etcd's own rule
//     at every revision (the oldest key leads): one transaction, guarded
//     by the old leader's key and the successor's, deletes the key of
//     each candidate queued between them (each guarded by its
//     CreateRevision, and replaced by a mark on its lease), then the old
//     leader's key, so the successor's key is the oldest from that
//     revision on and no revision is without a leader. A skipped
//     candidate, finding its key gone with its mark, puts the key again,
//     behind the successor, and waits on: it never leads in between, and
//     leads later in its new place with a token greater than the
//     successor's. Leader, Observe and `etcdctl elect -l` name the
//     successor from the revision it leads. A hand-over that skips
//     candidates is refused (ErrForeignCandidate, the term going on)
//     while any candidate that is not baton's waits in the election:
//     baton's candidates are those that write a record, every release
//     since hand-overs skip (an older baton's count as not baton's). If
//     the successor leaves before the transaction, the term has ended
//     already and Transfer resigns (ErrNoCandidate): the next in the
//     queue leads, never two.
//   - Candidates of both strategies never lead together: an Oldest
//     Campaign is refused once a Preferred record exists, and a Preferred
//     candidate waits for the Oldest ones that were there first to leave.
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
//   - That a live-looking candidate works: one that crashed without its
//     lease being revoked is taken for live until the lease expires, so a
//     Transfer to it succeeds and a Preferred election may wait for it.
//   - That a preempted leader stops before its successor starts: at the
//     deadline its key is deleted first and the successor takes in a later
//     transaction, and the old leader learns it from its watch (fencing
//     covers the rest). The deadline runs on the requester's clock.
//   - Transfer's report after a reply lost in flight: if its transaction
//     applied unheard and the successor resigned before the retry read
//     the election, Transfer returns an error wrapping ErrNotLeader
//     although it handed over.
//   - A skipped candidate's place: it puts its key again once it heard
//     of the hand-over, behind the successor and after any candidate
//     that campaigned meanwhile (the old leader's Run among them).
//   - An etcd concurrency.Election or `etcdctl elect` campaigning on a
//     Preferred election: never two leaders, but its key blocks hand-overs
//     and takes, and it leads when the Preferred leader resigns.
package election
