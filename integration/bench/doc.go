// Package bench measures baton against etcd's own client/v3/concurrency on
// the same workloads and the same embedded etcd member, alternating between
// the two so that both see the same machine load. It backs the baton-bench
// program (make bench) and the Go benchmarks of this package.
//
// A time alone means little on a shared machine: every measure is reported
// for both implementations, as the median of several runs with the lowest
// and highest run, and as a ratio, next to the disk's fdatasync floor
// measured in the same run.
package bench
