package etcdtest

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/netproxy"
)

// Proxied returns a client whose traffic passes through a proxy that the
// test can blackhole; both are closed on t.Cleanup.
func (s *Server) Proxied(tb testing.TB) (*clientv3.Client, *netproxy.Proxy) {
	tb.Helper()
	return Proxied(tb, s.Endpoint())
}

// Proxied returns a client of the member at the http:// endpoint whose
// traffic passes through a proxy that the test can blackhole; both are
// closed on t.Cleanup.
func Proxied(tb testing.TB, endpoint string) (*clientv3.Client, *netproxy.Proxy) {
	tb.Helper()
	p, err := netproxy.New(strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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

// Client returns a client of the member, closed on t.Cleanup.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := s.NewClient()
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Compact compacts the member's history up to its current revision.
func (s *Server) Compact(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "compact-probe")
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return rev, err
}

// Metric returns the sum of the member's series of the named metric, read
// from its /metrics page; it fails the test if there is none.
func (s *Server) Metric(tb testing.TB, name string) float64 {
	tb.Helper()
	resp, err := http.Get(s.endpoint + "/metrics")
	if err != nil {
		tb.Fatalf("etcdtest: metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("etcdtest: metrics: %v", err)
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			tb.Fatalf("etcdtest: metric line %q: %v", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		tb.Fatalf("etcdtest: metric %s not found", name)
	}
	return sum
}
