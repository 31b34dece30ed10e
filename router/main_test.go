package router_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/router"
)

// srvA and srvB are two independent single-member clusters shared by the
// package's tests; tests that stop a cluster start their own.
var srvA, srvB *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srvA, err = etcdtest.New(etcdtest.Config{Name: "a"}); err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		os.Exit(1)
	}
	if srvB, err = etcdtest.New(etcdtest.Config{Name: "b"}); err != nil {
		srvA.Stop()
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		os.Exit(1)
	}
	code := m.Run()
	srvA.Stop()
	srvB.Stop()
	if code == 0 {
		if err := etcdtest.Leaked(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// twoClusters is the map of the proofs: payments on a, jobs on b.
func twoClusters(a, b *etcdtest.Server) router.Map {
	return router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: b.Endpoints(), Namespaces: []string{"jobs"}},
	}}
}

func newRouter(t *testing.T, m router.Map, opts ...router.Option) *router.Router {
	t.Helper()
	r, err := router.New(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}
