package election_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/etcdtest"
)

// Observe carries each leader's attributes from its record: the Preferred
// leader's priority and version, a hand-over's new leader's, an Oldest
// leader's when it gave some, and none for a plain one; a Proclaim keeps
// them. The value stays plain (etcd's own observer sees it, see
// TestEtcdObserverFollowsPreferredHandOvers).
func TestObserveCarriesTheLeadersAttributes(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes"
	watcher := newElection(t, client(t), name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := watcher.Observe(octx)
	if l := next(t, obs); !l.IsZero() || l.Priority != 0 || l.Version != "" || l.Strategy != election.Oldest {
		t.Fatalf("first state = %+v, want no leader", l)
	}
	want := func(what, value string, prio int, version string, s election.Strategy) {
		t.Helper()
		for {
			l := next(t, obs)
			if l.Value != value {
				continue // an intermediate state
			}
			if l.Priority != prio || l.Version != version || l.Strategy != s {
				t.Fatalf("%s: Observe sent %+v; want priority %d, version %q, strategy %v", what, l, prio, version, s)
			}
			return
		}
	}
	a := preferred(t, cli, name, election.WithPriority(1), election.WithVersion("v1.9"))
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	want("first leader", "A", 1, "v1.9", election.Preferred)
	if err := ta.Proclaim(ctx, "A2"); err != nil {
		t.Fatal(err)
	}
	want("after Proclaim", "A2", 1, "v1.9", election.Preferred)

	b := preferred(t, client(t), name, election.WithPriority(5), election.WithVersion("v1.10"))
	bres := campaignAsync(ctx, b, "B")
	select {
	case <-ta.EndRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("the leader was never asked to end its term")
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bres, 5*time.Second, "B")
	want("after the hand-over", "B", 5, "v1.10", election.Preferred)
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next(t, obs); !l.IsZero() || l.Priority != 0 || l.Version != "" {
		t.Fatalf("after the last resignation: %+v, want no leader and no attributes", l)
	}

	c := newElection(t, client(t), name, election.WithPriority(3), election.WithVersion("v2"))
	tc := await(t, campaignAsync(ctx, c, "C"), 5*time.Second, "C")
	want("an oldest leader with attributes", "C", 3, "v2", election.Oldest)
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	d := newElection(t, client(t), name)
	await(t, campaignAsync(ctx, d, "D"), 5*time.Second, "D")
	want("a plain leader", "D", 0, "", election.Oldest)
}

// Observe reads the record of the candidate next in line while it waits,
// so the hand-over to it is sent with its attributes and without a read of
// the observer's on its way (the observer's only Txns are record reads).
func TestObserveReadsTheNextLeadersRecordAhead(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes-ahead"
	var txns atomic.Int64
	ocli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Txn" {
					txns.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ocli.Close()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := newElection(t, ocli, name).Observe(octx)
	if l := next(t, obs); !l.IsZero() {
		t.Fatalf("first state = %+v, want no leader", l)
	}
	a := newElection(t, client(t), name, election.WithPriority(2))
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	if l := next(t, obs); l.Value != "A" || l.Priority != 2 {
		t.Fatalf("Observe sent %+v, want A with priority 2", l)
	}
	b := newElection(t, client(t), name, election.WithPriority(7), election.WithVersion("b1"))
	bres := campaignAsync(ctx, b, "B")
	waitCandidates(t, a, 2)
	for deadline := time.Now().Add(5 * time.Second); txns.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the observer made %d record reads in 5s with B waiting next in line; want 2 (A's, and B's ahead of its term)", txns.Load())
		}
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, bres, 5*time.Second, "B")
	if l := next(t, obs); l.Value != "B" || l.Priority != 7 || l.Version != "b1" {
		t.Fatalf("Observe sent %+v, want B with priority 7, version b1", l)
	}
	if n := txns.Load(); n != 2 {
		t.Fatalf("the observer made %d record reads by the time it sent B; want 2 (none on the way to the new leader)", n)
	}
}
