package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/netproxy"
)

// Proxied returns a client whose traffic passes through a proxy that the
// test can blackhole; both are closed on t.Cleanup.
func (s *Server) Proxied(tb testing.TB) (*clientv3.Client, *netproxy.Proxy) {
	tb.Helper()
	p, err := netproxy.New(strings.TrimPrefix(s.Endpoint(), "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := s.NewClient(p.Endpoint())
	if err != nil {
		_ = p.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Restore()
		_ = cli.Close()
		_ = p.Close()
	})
	return cli, p
}

// Keys returns the keys under prefix.
func Keys(tb testing.TB, cli *clientv3.Client, prefix string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// WaitKeys waits, by watching, until prefix holds exactly n keys; it fails
// the test after 10 s.
func WaitKeys(tb testing.TB, cli *clientv3.Client, prefix string, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			tb.Fatalf("prefix %s never held %d keys: %v", prefix, n, err)
		}
		if int(resp.Count) == n {
			return
		}
		wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		if _, ok := <-wch; !ok {
			tb.Fatalf("prefix %s never held %d keys (it holds %d)", prefix, n, resp.Count)
		}
	}
}

// Context returns a context that ends after d or with the test.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Within fails the test if ch does not close within d.
func Within(tb testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		tb.Fatalf("%s did not happen within %v", what, d)
	}
}
