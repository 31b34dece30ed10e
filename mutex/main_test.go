package mutex_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
)

// srv is the package's one etcd server process; tests share it and use distinct
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

// session returns a session with the given TTL in seconds, closed with the
// test, for tests of mutexes sharing a caller's session.
func session(t *testing.T, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
