package election_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// Under Preferred, etcd's own concurrency.Election (as `etcdctl elect -l`
// uses it) sees the leader and its plain value at every step: the first
// leader, the one a Transfer names, and the one Resign hands over to.
func TestEtcdObserverFollowsPreferredHandOvers(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "etcd-observer"
	a := preferred(t, cli, name, election.WithPriority(1))
	b, c := preferred(t, cli, name), preferred(t, cli, name)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ee := concurrency.NewElection(s, strings.TrimSuffix(a.Prefix(), "/"))
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	seen := ee.Observe(octx)
	expect := func(value string) {
		t.Helper()
		for {
			select {
			case resp := <-seen:
				got := string(resp.Kvs[0].Value)
				if got == value {
					return
				}
				if got != "A" && got != "C" && got != "B" || strings.Contains(got, "{") {
					t.Fatalf("etcd's observer saw %q", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("etcd's observer never saw %q", value)
			}
		}
	}
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	expect("A")
	bres := campaignAsync(ctx, b, "B")
	waitCandidates(t, a, 2)
	cres := campaignAsync(ctx, c, "C")
	cands := waitCandidates(t, a, 3)
	if err := ta.Transfer(ctx, cands[2].Key); err != nil { // C, the younger
		t.Fatal(err)
	}
	tc := await(t, cres, 5*time.Second, "C")
	expect("C")
	if l, err := ee.Leader(ctx); err != nil || string(l.Kvs[0].Value) != "C" {
		t.Fatalf("etcd's Leader = %v, %v", l, err)
	}
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bres, 5*time.Second, "B")
	expect("B")
	_ = tb.Resign(ctx)
}
