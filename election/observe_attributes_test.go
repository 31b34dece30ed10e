package election_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
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

// txnClient is a client whose every Txn first goes through onTxn (the
// observer's only Txns are record reads).
func txnClient(t *testing.T, onTxn func(ctx context.Context) error) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Txn" {
					if err := onTxn(ctx); err != nil {
						return err
					}
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func counting(n *atomic.Int64) func(context.Context) error {
	return func(context.Context) error { n.Add(1); return nil }
}

// Observe reads the record of the candidate next in line while it waits,
// so the hand-over to it is sent with its attributes and without a read of
// the observer's on its way.
func TestObserveReadsTheNextLeadersRecordAhead(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes-ahead"
	var txns atomic.Int64
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := newElection(t, txnClient(t, counting(&txns)), name).Observe(octx)
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
			t.Fatalf("the observer made %d record reads in 5s with B waiting next in line; want A's and B's, ahead of its term", txns.Load())
		}
	}
	time.Sleep(50 * time.Millisecond) // B's read answered
	before := txns.Load()
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, bres, 5*time.Second, "B")
	if l := next(t, obs); l.Value != "B" || l.Priority != 7 || l.Version != "b1" {
		t.Fatalf("Observe sent %+v, want B with priority 7, version b1", l)
	}
	if n := txns.Load(); n != before {
		t.Fatalf("the observer made %d record reads on the way to the new leader; want none", n-before)
	}
}

// A record read that hangs holds a state back for one bounded read, about
// a second, not more; Close ends an Observe waiting on one promptly.
func TestObserveWaitsForAHangingRecordReadOnce(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes-hang"
	a := newElection(t, client(t), name, election.WithPriority(3))
	await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	hang := txnClient(t, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	start := time.Now()
	l := next(t, newElection(t, hang, name).Observe(ctx))
	if d := time.Since(start); l.Value != "A" || l.Priority != 0 || d > 1700*time.Millisecond {
		t.Fatalf("first state %+v after %v; want A without attributes after about a second (one bounded read)", l, d)
	}
	o := newElection(t, hang, name)
	ch := o.Observe(ctx)
	time.Sleep(300 * time.Millisecond) // the first state waits for its read
	start = time.Now()
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Fatalf("Close took %v with a record read in flight", d)
	}
	for range ch {
	}
}

// Observe's first state reads a long-lived leader's record at the state's
// revision: one read, even when the key's own revisions were compacted.
func TestObserveReadsACompactedLeadersRecordOnce(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes-compacted"
	a := newElection(t, client(t), name, election.WithPriority(4))
	await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	for i := range 5 {
		if _, err := cli.Put(ctx, "/observe-attributes-compacted-filler", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Compact(ctx, cli); err != nil {
		t.Fatal(err)
	}
	var txns atomic.Int64
	l := next(t, newElection(t, txnClient(t, counting(&txns)), name).Observe(ctx))
	if l.Value != "A" || l.Priority != 4 || txns.Load() != 1 {
		t.Fatalf("first state %+v after %d record reads; want A with priority 4 after one", l, txns.Load())
	}
}

// afterFuncCtx counts the functions registered on it that are neither run
// nor stopped: the contexts derived from it still attached.
type afterFuncCtx struct {
	context.Context
	live atomic.Int64
}

// Value hides the embedded context, so that contexts derived from c attach
// through AfterFunc rather than to it directly.
func (c *afterFuncCtx) Value(any) any { return nil }

func (c *afterFuncCtx) AfterFunc(f func()) func() bool {
	c.live.Add(1)
	var once atomic.Bool
	done := func() bool {
		if once.CompareAndSwap(false, true) {
			c.live.Add(-1)
			return true
		}
		return false
	}
	stop := context.AfterFunc(c.Context, func() {
		if done() {
			f()
		}
	})
	return func() bool { return stop() && done() }
}

// An Observe that ended (by Close) leaves nothing attached to the caller's
// ctx: its record reads hang off the observing goroutine's own.
func TestObserveLeavesNothingOnTheCallersContext(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "observe-attributes-ctx"
	a := newElection(t, client(t), name)
	await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	b := newElection(t, client(t), name)
	campaignAsync(ctx, b, "B")
	waitCandidates(t, a, 2)
	parent := &afterFuncCtx{Context: ctx}
	for range 10 {
		o, err := election.New(client(t), name)
		if err != nil {
			t.Fatal(err)
		}
		ch := o.Observe(parent)
		next(t, ch)
		time.Sleep(20 * time.Millisecond)
		_ = o.Close()
		for range ch {
		}
	}
	if n := parent.live.Load(); n != 0 {
		t.Fatalf("after 10 Observe and Close, %d contexts remain attached to the caller's", n)
	}
}
