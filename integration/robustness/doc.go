// Package robustness drives random traffic on every baton primitive while
// it injects random faults into the etcd cluster under it, records every
// call and return, and checks the whole history afterwards — the method of
// etcd's own tests/robustness, applied to the lock layer above etcd.
//
// Traffic: workers, each on its own client behind its own proxy, take and
// release mutexes, semaphore permits, read and write locks and election
// terms on a few shared names, cancel their contexts and close their
// objects at random moments, and write through fencing guards while they
// hold. Holder child processes (this binary run again) do the same for
// locks and terms, so that a holder can be frozen with SIGSTOP; a variant
// holds through the baton CLI. Beside them, one goroutine per traffic kind
// (TrafficKinds) reaches what random steps rarely do: bursts of 8 to 12
// acquisitions on one fresh session, crowds of 64 to 72 waiters on one
// name, mutex Sets over overlapping names, a lock-delay name with unclean
// losses, RequestRelease, Oldest transfers past waiting candidates,
// Preferred elections with priorities, versions, RequestEnd and
// preemption, etcd's concurrency contenders in baton's prefixes, an
// operator's `baton unlock/resign --force`, shard members (some of whose
// fns outlive the drain timeout, one scenario in two a member whose fns
// are stuck after a loss rejoining as the youngest), a waiter past
// one read of its queue whose waiters ahead give up (give-up), more write
// locks of one name at once through one session than it sends alone
// (twins), and on its own connection a request that applies after its
// caller gave up, at the step each path for unheard writes is for
// (unheard), and callers through a `baton serve` process with the
// generated Connect client, over gRPC and HTTP/JSON, Hold streams and
// Shards members (which acknowledge moved shards' drains promptly, late
// or never, and leave or go silent), judged by their own rule: told by
// the stream's lost (or a shard's own Drained) or by the validity of
// their last heartbeat, whichever comes first (serve; the server itself
// stopped past its TTL now and then). A run in which a kind made no acquisition
// fails (coverage).
//
// Faults, from a declared list dealt in shuffled rounds (every kind once a
// round): member kill and restart, leader transfer, quorum loss, a member
// (the leader half the time) cut from its peers but not from its clients
// (linearizable reads through it judged by the register checker), client
// blackhole and slow link,
// compaction and defragmentation under watches, an admin deleting a
// holder's key or revoking its lease, or range-deleting marks and
// contender or candidate keys, a holder process frozen past its TTL, a
// worker's lease clock running 15% slow and jumping forward while it is
// cut off, and clients whose requests apply with their replies lost
// (reply-lost) or are held back and delivered after their connections
// were cut and their callers retried (late-request). Each fault's start
// and end are in the history; every 18 s of faults are followed by 8 to
// 12 s of quiet, and a health watch records when a member is down, behind
// or unresponsive, or this process was not scheduled (disturbances), and
// the round trip of a linearizable read every 250 ms; a meter records
// when this process, and each holder process, stood still (stalls).
//
// Checks: etcd's own history of every key, recorded by one watch from
// revision 1 that nothing compacts ahead of, is replayed against each
// primitive's rule (mutual exclusion, at most limit permits, no reader
// with a writer, one leader) using the holders' fenced writes as evidence
// of who acted when; the fenced registers and guards are checked for
// linearizability with porcupine; each holder's Context must have ended
// before the next holder's grant was observed ("knows first"); a free lock
// is taken (a key first in line, with no fault or disturbance near, is
// returned to its caller or goes within FreeBound, or 4 of the round
// trips in progress meanwhile when longer, plus this process's stalls);
// every acquisition returned a key etcd let hold (no candidate leads out
// of turn); no holder acquires within a lock-delay of an unclean loss; no
// two keys of one name are created in one revision (distinct tokens); no
// key outlives every call that could own it (given up); a release or a
// hand-over told "not held" found its key deleted by something else (told
// truly); a moved shard's next owner starts only after the old fn returned
// (drained); a shard with no key queued while a settled live member could
// take it (not one its member key names stuck) gets one within 2 s
// (owned); every Observe stream must move forward only, report the true
// state at each revision it names, and converge after each fault; no key
// may be left once everything is closed; each Registerer of the run
// (labels.go; a low WithMetricLabelLimit, so names collapse into
// "(other)" under the traffic) carries no more default name or resource
// values over the run than its limit, and counts every collapse. A run
// that was starved says so in its last line, and the checks that judge by
// a clock count what they did not judge for it.
//
// The run is decided by its seed: the random choices of every worker and
// of the fault schedule. etcd's timing is not, so a replay reproduces the
// same traffic and faults, not the same interleaving.
package robustness
