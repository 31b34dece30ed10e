package election_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// srv is the package's one embedded etcd; tests share it and use distinct
// election names.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}
