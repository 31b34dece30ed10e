package rwmutex_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
	"github.com/batonhq/baton/rwmutex"
)

// srv is the package's one etcd server process; tests share it and use distinct
// names.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}

func proxied(t *testing.T) (*clientv3.Client, *netproxy.Proxy) {
	t.Helper()
	return srv.Proxied(t)
}

func newRW(t *testing.T, cli *clientv3.Client, name string, opts ...rwmutex.Option) *rwmutex.RWMutex {
	t.Helper()
	rw, err := rwmutex.New(cli, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rw.Close() })
	return rw
}
