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
// holds through the baton CLI.
//
// Faults, from a declared list at random times: member kill and restart,
// leader transfer, quorum loss, client blackhole and slow link,
// compaction and defragmentation under watches, an admin deleting a
// holder's key or revoking its lease, a holder process frozen past its
// TTL. Each fault's start and end are in the history.
//
// Checks: etcd's own history of every key, recorded by one watch from
// revision 1 that nothing compacts ahead of, is replayed against each
// primitive's rule (mutual exclusion, at most limit permits, no reader
// with a writer, one leader) using the holders' fenced writes as evidence
// of who acted when; the fenced registers and guards are checked for
// linearizability with porcupine; each holder's Context must have ended
// before the next holder's grant was observed ("knows first"); every
// Observe stream must move forward only, report the true state at each
// revision it names, and converge after each fault; no key may be left
// once everything is closed.
//
// The run is decided by its seed: the random choices of every worker and
// of the fault schedule. etcd's timing is not, so a replay reproduces the
// same traffic and faults, not the same interleaving.
package robustness
