package rbac_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
)

// srv is the package's shared embedded etcd, auth off. Tests on it use
// their own namespaces and users; tests that change the whole auth state
// (pruning, enabling auth) start their own member.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}
