// Package harness is what the measurements share (bench, scale and the
// programs baton-bench and baton-scale): the two implementations compared
// (baton, and etcd's client/v3/concurrency as its documentation uses it),
// a client that counts its requests, the held-locks workload and its child
// process, the child processes of a phase, a shard group's balance, the
// statistics (medians, nearest-rank percentiles), and what the machine
// offers (the disk's fdatasync floor, load, limits).
package harness
