package semaphore_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/semaphore"
)

// srv is the package's one embedded etcd; tests share it and use distinct
// names.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}

func newSem(t *testing.T, cli *clientv3.Client, name string, limit int, opts ...semaphore.Option) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(cli, name, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func clientv3OpPut(k, v string) clientv3.Op { return clientv3.OpPut(k, v) }
