package election_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/integration/netproxy"
)

// srv is the package's one embedded etcd; tests share it and use distinct
// lock names.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}

// proxied returns a client whose traffic passes through a proxy the test
// can blackhole.
func proxied(t *testing.T) (*clientv3.Client, *netproxy.Proxy) {
	t.Helper()
	return srv.Proxied(t)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	return etcdtest.Keys(t, cli, prefix)
}

// within fails the test if ch does not close within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}
