// Package planted switches on deliberate bugs in the core, one at a time,
// for the robustness suite to prove that its checks find each
// (integration/robustness, "make robustness-planted"). Only a build with
// the robustness_planted tag has them; in every other build On is a
// constant false and the bugs' code is compiled out.
//
// The bugs, by name:
//
//	a  a release deletes its key without the CreateRevision guard (no effect
//	   to find today: a session reserves each key until its holder's
//	   release is done, so no newer incarnation of the key exists for an
//	   unguarded delete to hit; the guard is defence in depth)
//	b  a holder is told after the revoke that lets the next one in, not before
//	c  a semaphore counts the holders ahead from a stale read
//	d  Observe re-reads on a deletion and sends that read as the deletion's state
//	e  a second Campaign on one session takes the first's key without ending its term
//	f  the release-mark rule: every revision that deletes a key counts as a
//	   holder's own release (internal/queue, AfterDeletion)
//	g  enqueue grouping: two enqueues of one queue go in one transaction,
//	   their keys sharing a CreateRevision (internal/queue)
//	h  the foreign-candidate check: a Transfer skips an etcd candidate
//	   (election)
//	i  the moved-mark re-put: a skipped candidate puts its key again but
//	   waits with its old revision (election): it reads the keys ahead of
//	   the old one, and takes its key at the revision read (internal/core:
//	   without that half the read finds the old revision wrong and the
//	   move's retry path returns the new one, so the bug heals itself in
//	   one round trip)
//	j  lock-delay timing: the marker's lease is half the delay (internal/delay)
//	k  a Set member taken alone: a mutex's first read ignores Set keys ahead
//	   (internal/queue)
//	l  the gap before a waiter's watch: a waiter whose watch of the key
//	   ahead began after its read does not read that key, and misses a
//	   release between the two (internal/queue, WaitGone): the free-lock
//	   check's
//	m  the drain: a shard whose Context ended is released at once, not
//	   once its fn returned (shard): the drained check's
//	n  a default metric label collapsed into "(other)" is not counted in
//	   baton_metric_labels_collapsed_total (internal/metrics): the
//	   metric-labels check's
//	o  a metric label's place is freed when its last user closes
//	   (internal/metrics), so later names past the limit take it: the
//	   metric-labels check's
//	p  a broken watch stream does not tell its waiters, who wait for
//	   deletions that no stream will deliver (internal/watch): the
//	   free-lock check's
//	q  baton serve's validity: a hold's validity runs a whole TTL from
//	   the caller's last heartbeat, not to the server's heartbeat deadline
//	   (a fifth of a TTL sooner) or the lease's, whichever is earlier
//	   (cmd/baton/serve): a caller cut off from the server counts itself
//	   holding after the server deleted its key; the knows-first check's
//	r  baton serve's release requests: a hold that begins while its
//	   namespace's request watch runs is not registered with it
//	   (cmd/baton/serve, requestWatch), so an operator's request for it
//	   is kept as unclaimed and never delivered: the request-delivered
//	   check's
//	s  the stuck reassignment: a member never names the shards whose fn
//	   outlived the drain in its member key (shard), so the assignment
//	   gives one back to it, which cannot take it: the owned check's
//	t  baton serve's drain deadline: a moved shard no Drained acknowledged
//	   is released at its drain deadline at once, its caller neither sent
//	   lost (MOVED) for it nor out of the validity it was given
//	   (cmd/baton/serve, Shards): the caller still counts the shard its
//	   own when its key goes; the knows-first check's
//	u  baton serve's heartbeat replies name no shard sent lost at its
//	   drain deadline (cmd/baton/serve, Shards): a member that reads its
//	   stream slowly, still heartbeating, counts the shard its own when
//	   the next owner has it: the knows-first check's
//	v  a slow path: a mutex's or an election's waiter that heard the
//	   deletion that frees the lock ignores it for 6 s (internal/queue):
//	   the free-lock check's, on a loaded machine too
//	w  the enqueue fence: an enqueue that may have applied unheard is not
//	   voided (internal/queue, internal/core): neither after a retry took
//	   the key nor before a failed acquisition's cleanup reads it, so a
//	   late one puts a key nobody waits in: the given-up check's
//	x  an unheard Set release: a release of several holds whose first
//	   attempt applied unheard is taken for keys gone before it
//	   (internal/group): the told-truly check's
//	y  an unheard hand-over: a hand-over whose first attempt applied
//	   unheard is taken for one that did not apply (internal/group): the
//	   told-truly check's
//	z  a retried release: a release whose first attempt applied unheard
//	   finds its key gone and says it was not held (internal/core): the
//	   told-truly check's
//	A  a lost lease's keys: baton serve's sessions revoke a lease lost to
//	   failed renewals at once, not at its deadline (internal/lease,
//	   KeysToDeadline), so a caller cut off from the server counts itself
//	   holding after its key went: the knows-first check's
package planted

// Env names the bug that On switches on, in a robustness_planted build.
const Env = "BATON_PLANTED_BUG"

// Names are the bugs On knows, a letter each.
const Names = "abcdefghijklmnopqrstuvwxyzA"
