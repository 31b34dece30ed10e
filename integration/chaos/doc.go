// Package chaos holds baton's fault-injection tests, run by `make
// test-chaos` and with every `go test ./...`: real embedded etcd clusters
// (package internal/embedetcd/cluster), holder processes that are the test binary
// run again as a child so that they can be stopped with SIGSTOP and killed
// with SIGKILL, proxies that partition a client, slow and frozen watchdog
// clocks, and a linearizability check of fenced writes with porcupine.
//
// Scenarios, one test each:
//
//   - TestZombieHolderPausedPastTTL: a holder process frozen past its TTL
//     writes with its old token once resumed; the in-memory guard and the
//     fenced etcd transactions reject every such write.
//   - TestSkewedClockHoldersPartitioned: holders whose watchdog clock runs
//     at half speed or not at all, cut off from etcd: their contexts end
//     late or never, and fencing still rejects their late writes.
//   - TestLeaderMemberKilled: the etcd leader killed while locks are held
//     and candidates wait; service resumes, never two holders.
//   - TestMinorityMemberKilled: a follower killed under load; no lock or
//     campaign call fails.
//   - TestQuorumLostLongerThanTTL: two of three members down for longer
//     than the TTL; every holder's context ends before quorum returns,
//     singletons under election.Run lead again, no key is left behind.
//   - TestPartitionedClientEndsFirst: a holder partitioned from the whole
//     cluster learns of its loss before anyone else acquires.
//   - TestCompactionAndDroppedWatches: Observe and waiting Lock calls
//     across compactions and reset watch streams.
//   - TestLinearizableFencedRegister: clients lock, write a fenced register
//     and release under pauses, partitions and a member restart; the
//     history is checked with porcupine.
//
// Measured figures (lead times, failover and resume times) are logged
// with the prefix "FIGURE"; run `make test-chaos` to see them.
package chaos
