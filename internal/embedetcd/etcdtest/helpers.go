package etcdtest

import (
	"context"
	"testing"
	"time"

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

// Context returns a context that ends after d or with the test.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	return etcdtest.Context(tb, d)
}

// Within fails the test if ch does not close within d.
func Within(tb testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	tb.Helper()
	etcdtest.Within(tb, ch, d, what)
}

// FreeAddr returns a 127.0.0.1 host:port that was free a moment ago.
func FreeAddr() (string, error) { return etcdtest.FreeAddr() }
