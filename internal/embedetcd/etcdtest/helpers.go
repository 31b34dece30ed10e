package etcdtest

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
)

// The helpers are the library harness's (internal/etcdtest), one
// definition for both.

// Proxied returns a client whose traffic passes through a proxy that the
// test can blackhole; both are closed on t.Cleanup.
func (s *Server) Proxied(tb testing.TB) (*clientv3.Client, *netproxy.Proxy) {
	tb.Helper()
	return etcdtest.Proxied(tb, s.Endpoint())
}

// Keys returns the keys under prefix.
func Keys(tb testing.TB, cli *clientv3.Client, prefix string) []string {
	tb.Helper()
	return etcdtest.Keys(tb, cli, prefix)
}

// WaitKeys waits, by watching, until prefix holds exactly n keys; it fails
// the test after 10 s.
func WaitKeys(tb testing.TB, cli *clientv3.Client, prefix string, n int) {
	tb.Helper()
	etcdtest.WaitKeys(tb, cli, prefix, n)
}

// Context, Within and FreeAddr are etcdtest's.
var (
	Context  = etcdtest.Context
	Within   = etcdtest.Within
	FreeAddr = etcdtest.FreeAddr
)
