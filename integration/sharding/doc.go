// Package sharding measures what routing namespaces to several etcd
// clusters (package router) buys on this machine: aggregate lock
// throughput over one cluster and over two, side by side in one run, and
// one namespace's cycle latency on its cluster while another cluster is up
// and after it stops. Its figures back docs/scaling.md; run them with
//
//	make bench-shard
//
// (BATON_SHARD_BENCH=1 go test -run Figures -v ./integration/sharding).
// Without BATON_SHARD_BENCH the tests run one short round, as a check that
// the measuring code works.
package sharding
