// Package compat runs baton against real etcd server binaries of the
// versions people run (3.4, 3.5, 3.6), each as a 3-member cluster of OS
// processes on 127.0.0.1, and checks that locks, elections, failover,
// etcdctl interoperation and the TLS, auth and RBAC set-up of
// docs/security.md work on each. That set-up is docs/security.md itself:
// SecuritySteps reads its shell and policy blocks, and the suite runs them
// in order with a short, named list of substitutions (addresses, the
// directory, the binaries of the version under test).
//
// The binaries come from .ci/etcd-binaries.sh, which prints the directory
// holding them (BATON_COMPAT_DIR, with etcd-3.4/, etcd-3.5/ and etcd-3.6/,
// each holding etcd and etcdctl). Without BATON_COMPAT_DIR, or without a
// version's binaries, the tests of that version skip; with
// BATON_COMPAT_REQUIRE=1 (set by `make test-compat`) they fail instead.
// BATON_COMPAT_VERSIONS (e.g. "3.4,3.6") narrows the versions run.
package compat
