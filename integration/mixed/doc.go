// Package mixed proves that a fleet in the middle of a rolling upgrade is
// safe: processes of the previous release's build and of the current build
// contend on the same names of one etcd cluster at once, while processes
// of both builds are killed (SIGKILL), frozen past their lease (SIGSTOP,
// then SIGCONT; the worker, asked by SIGUSR1, stops itself just before a
// write in a hold, so that write comes after its lease, and is stopped
// from outside wherever it is when it reaches no such point in 2 s) and
// cut off (their client's proxies blackholed), and a
// member of the three-member cluster is cut from its peers.
//
// Both sides run one worker program (package worker, in this directory):
// the same source built against each library, using only the public API
// both share. Its lanes take mutexes (three at once on one shared
// session), mutex Sets of two names, semaphore permits, read and write
// locks, election terms under Oldest (hand-overs by Resign and Transfer)
// and Preferred (priorities, the build as the version, end requests,
// preemption), a lock-delay name whose holders are sometimes lost
// without releasing, and shards; each build's `baton lock NAME --` and
// `baton lock A B --` run the worker as their command. Every holder writes
// while it holds, fenced (a transaction guarded by its key, and the etcd
// guard's register), and reports on stdout each acquisition with its key
// and token, when its Context ended and why, and each write's outcome, on
// the machine's monotonic clock.
//
// The run is judged by the robustness suite's checks (robustness.Check)
// over etcd's own history of every key: exclusion and the primitive's rule
// at every revision, grants in token order, the holder knows first (where
// a process's end can be observed), a free lock is taken (within a bound
// that follows the run's own round trips and this process's stalls), no
// key outlives every call that could own it, the lock-delay waited out,
// fenced registers linearizable and their fences never going down; and
// by coverage: every lane of both builds acquired. A worker
// built with the mixed_planted tag writes without fencing: a run with it
// must report a violation (TestPlantedBugIsFound).
//
// The previous release's binaries come from BATON_MIXED_OLD (a directory
// holding baton, worker and BASE, built by .ci/mixed-base.sh from a git
// worktree of the commit BATON_MIXED_BASE, and cached); without it the
// tests skip, unless BATON_MIXED_REQUIRE is set. The current build is
// built by the test.
package mixed
