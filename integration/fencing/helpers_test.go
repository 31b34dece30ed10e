package fencing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
)

// The helpers of the library's own fencing tests (fencing/etcd_test.go)
// that the SQL and trace tests here share.

// rawHolder is a Holder whose transactions run on a plain client with no
// ownership compare: it lets a test present any token.
type rawHolder struct {
	cli *clientv3.Client
	t   fencing.Token
}

func (h rawHolder) Token() fencing.Token                 { return h.t }
func (h rawHolder) Txn(ctx context.Context) clientv3.Txn { return h.cli.Txn(ctx) }

// freshNS returns a namespace no earlier run used.
func freshNS(prefix string) string { return fmt.Sprintf("%s-%x", prefix, rand.Uint32()) }

func newEtcdGuard(t *testing.T, opts ...fencing.Option) *fencing.EtcdGuard {
	t.Helper()
	g, err := fencing.NewEtcdGuard(srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// wantRejections fails t unless reg counts n rejections of resource.
func wantRejections(t *testing.T, reg *prometheus.Registry, resource string, n int) {
	t.Helper()
	want := fmt.Sprintf(`# HELP baton_fencing_rejections_total Writes rejected for carrying a stale fencing token.
# TYPE baton_fencing_rejections_total counter
baton_fencing_rejections_total{resource=%q} %d
`, resource, n)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_fencing_rejections_total"); err != nil {
		t.Fatal(err)
	}
}
