package mutex_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
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
