package election_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

func preferred(t *testing.T, cli *clientv3.Client, name string, opts ...election.Option) *election.Election {
	t.Helper()
	return newElection(t, cli, name, append([]election.Option{election.WithStrategy(election.Preferred), election.WithTTL(5 * time.Second)}, opts...)...)
}

// 100 hand-overs between A and C while B, older than every record A and
// C write after the first, waits the whole time: any moment without a
// leader would let B take.
func TestTransferHundredTimesWhileAThirdWaits(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 120*time.Second)
	const name = "transfer-100"
	a, b, c := preferred(t, cli, name), preferred(t, cli, name), preferred(t, cli, name)
	from := revNow(t, cli)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	waitCandidates(t, a, 2)
	cres := campaignAsync(ctx, c, "C")
	waitCandidates(t, a, 3)

	const n = 100
	var gaps []time.Duration
	tokens := []int64{int64(ta.Token())}
	leader, other := ta, cres
	es := map[string]*election.Election{"A": a, "C": c}
	for i := 0; i < n; i++ {
		to := "C"
		if leader.Value() == "C" {
			to = "A"
		}
		cands := waitCandidates(t, a, 3) // the other has re-campaigned
		var key string
		for _, cd := range cands {
			if cd.Value == to {
				key = cd.Key
			}
		}
		start := time.Now()
		if err := leader.Transfer(ctx, key); err != nil {
			t.Fatalf("transfer %d to %s: %v", i, to, err)
		}
		if cause := context.Cause(leader.Context()); !errors.Is(cause, election.ErrTransferred) {
			t.Fatalf("transfer %d: old term's cause = %v", i, cause)
		}
		next := await(t, other, 5*time.Second, "successor "+to)
		gaps = append(gaps, time.Since(start))
		tokens = append(tokens, int64(next.Token()))
		if next.Value() != to {
			t.Fatalf("transfer %d: %q leads, want %q", i, next.Value(), to)
		}
		// The old leader campaigns again, behind B.
		old := leader.Value()
		other = campaignAsync(ctx, es[old], old)
		leader = next
	}
	notYet(t, bres, "B's Campaign")
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d after %d", i, tokens[i], tokens[i-1])
		}
	}
	t.Logf("hand-over A<->C (Transfer call to the successor's Campaign returning), %d samples: p50 %v, p99 %v, max %v",
		len(gaps), percentile(gaps, 0.5), percentile(gaps, 0.99), percentile(gaps, 1))
	floor := gracefulFailovers(t, cli, n)
	t.Logf("floor in the same run, Oldest graceful failover (Resign to the next Campaign returning), %d samples: p50 %v, p99 %v, max %v",
		len(floor), percentile(floor, 0.5), percentile(floor, 0.99), percentile(floor, 1))

	_ = leader.Resign(ctx) // hands over to B, the best waiting (oldest record)
	tb := await(t, bres, 5*time.Second, "B after the last resign")
	_ = tb.Resign(ctx)
	_ = a.Close()
	_ = c.Close()
	h := readLeaders(t, cli, a.Prefix(), from)
	if len(h.violations) > 0 {
		t.Fatalf("two leaders at once: %v", h.violations)
	}
	if len(h.gaps) > 0 {
		t.Fatalf("revisions without a leader between leaders: %v", h.gaps)
	}
	// A, C 100 times, B, and the one of A and C that campaigned last.
	if got := len(h.leaders); got != n+3 {
		t.Fatalf("%d leaders in etcd's history, want %d", got, n+3)
	}
	for i, l := range h.leaders {
		if (l.Value == "B") != (i == n+1) {
			t.Fatalf("leader %d at revision %d is %s", i, l.Rev, l.Value)
		}
	}
}

func TestTransferToALeftCandidateKeepsLeadership(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-gone"
	a, c := preferred(t, cli, name), preferred(t, cli, name)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	cctx, ccancel := context.WithCancel(ctx)
	cres := campaignAsync(cctx, c, "C")
	cands := waitCandidates(t, a, 2)
	key := cands[1].Key
	ccancel() // C leaves: its record is deleted
	if r := <-cres; r.err == nil {
		t.Fatal("C's Campaign succeeded after its ctx ended")
	}
	waitCandidates(t, a, 1)

	err := ta.Transfer(ctx, key)
	if !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to a left candidate = %v, want ErrNoCandidate", err)
	}
	if !ta.IsLeader() {
		t.Fatalf("A's term ended: %v", context.Cause(ta.Context()))
	}
	l, err := a.Leader(ctx)
	if err != nil || l.Token != ta.Token() {
		t.Fatalf("Leader = %+v, %v; want A's token %d", l, err, ta.Token())
	}

	// C dies: its lease is revoked, and A is told the same.
	c2 := preferred(t, cli, name)
	c2res := campaignAsync(ctx, c2, "C2")
	cands = waitCandidates(t, a, 2)
	if _, err := cli.Revoke(ctx, cands[1].LeaseID); err != nil {
		t.Fatal(err)
	}
	waitCandidates(t, a, 1)
	if err := ta.Transfer(ctx, cands[1].Key); !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to a dead candidate = %v, want ErrNoCandidate", err)
	}
	if !ta.IsLeader() {
		t.Fatalf("A's term ended: %v", context.Cause(ta.Context()))
	}
	<-c2res
	if err := ta.Transfer(ctx, ta.Key()); !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to itself = %v, want ErrNoCandidate", err)
	}
	if err := ta.Transfer(ctx, "/baton/v1/election/nobody/1"); !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to no candidate = %v, want ErrNoCandidate", err)
	}
	if !ta.IsLeader() {
		t.Fatal("A's term ended after refused transfers")
	}
}

// The target leaves between Transfer's check and its transaction: the
// transaction refuses, A's term has ended, and the best remaining
// candidate (B) leads; never two leaders, no third key.
func TestTransferTargetLeavesAtTheLastMoment(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-race"
	a, b, c := preferred(t, cli, name), preferred(t, cli, name), preferred(t, cli, name)
	from := revNow(t, cli)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	waitCandidates(t, a, 2)
	cctx, ccancel := context.WithCancel(ctx)
	cres := campaignAsync(cctx, c, "C")
	cands := waitCandidates(t, a, 3)
	election.SetHandOverHook(a, func(string) {
		ccancel()
		<-cres // C's record is gone
	})
	err := ta.Transfer(ctx, cands[2].Key)
	if !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer = %v, want ErrNoCandidate", err)
	}
	if ta.IsLeader() {
		t.Fatal("A still leads after a hand-over that ended its term")
	}
	tb := await(t, bres, 5*time.Second, "B")
	_ = tb.Resign(ctx)
	h := readLeaders(t, cli, a.Prefix(), from)
	if len(h.violations) > 0 {
		t.Fatalf("two leaders: %v", h.violations)
	}
	for _, l := range h.leaders {
		if l.Value == "C" {
			t.Fatalf("C led at %d after it left", l.Rev)
		}
	}
}

// A Preferred candidate waits out the Oldest candidates that were there
// first (never preempting them): the way from Oldest to Preferred. Once a
// Preferred record exists, an Oldest Campaign is refused.
func TestStrategiesAgreeOrWait(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "agree"
	old := newElection(t, cli, name)
	to := await(t, campaignAsync(ctx, old, "old"), 5*time.Second, "oldest")
	p := preferred(t, cli, name, election.WithPriority(10))
	pres := campaignAsync(ctx, p, "p")
	cands := waitCandidates(t, old, 2)
	if cands[0].Value != "old" || cands[0].Strategy != election.Oldest || cands[1].Value != "p" || cands[1].Strategy != election.Preferred {
		t.Fatalf("candidates = %+v", cands)
	}
	o2 := newElection(t, cli, name)
	if _, err := o2.Campaign(ctx, "o2"); !errors.Is(err, election.ErrStrategy) || !errors.Is(err, election.ErrInvalid) || !strings.Contains(err.Error(), "preferred") {
		t.Fatalf("Oldest joining once a Preferred candidate is there = %v", err)
	}
	if got := etcdtest.Keys(t, cli, old.Prefix()); len(got) != 1 {
		t.Fatalf("keys after a refused Campaign = %v, want the leader's alone", got)
	}
	notYet(t, pres, "the Preferred candidate, behind an Oldest leader")
	if !to.IsLeader() {
		t.Fatal("the Oldest leader was preempted")
	}
	if err := to.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tp := await(t, pres, 5*time.Second, "the Preferred candidate after the Oldest one left")
	if tp.Token() <= to.Token() {
		t.Fatalf("token %d after %d", tp.Token(), to.Token())
	}
	_ = tp.Resign(ctx)
}

func TestPreferredPicksByPriorityThenVersionThenAge(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "preferred-rank"
	first := preferred(t, cli, name, election.WithPriority(1), election.WithVersion("v1.10"))
	tf := await(t, campaignAsync(ctx, first, "first"), 5*time.Second, "first")
	es := map[string]*election.Election{
		"low":   preferred(t, cli, name, election.WithPriority(0), election.WithVersion("v1.0")),
		"newer": preferred(t, cli, name, election.WithPriority(1), election.WithVersion("v1.11")),
		"older": preferred(t, cli, name, election.WithPriority(1), election.WithVersion("v1.9")),
		"none":  preferred(t, cli, name, election.WithPriority(1)),
	}
	res := map[string]<-chan campaignResult{}
	for _, v := range []string{"low", "newer", "none"} {
		res[v] = campaignAsync(ctx, es[v], v)
		waitCandidates(t, first, len(res)+1)
	}
	cands := waitCandidates(t, first, 4)
	want := []string{"first", "newer", "none", "low"}
	for i, c := range cands {
		if c.Value != want[i] || c.Strategy != election.Preferred {
			t.Fatalf("candidate %d = %+v; want %s (order %v)", i, c, want[i], want)
		}
	}
	if !cands[0].Leader || cands[0].Priority != 1 || cands[0].Version != "v1.10" || cands[0].Token != tf.Token() {
		t.Fatalf("leader = %+v", cands[0])
	}
	// "older" (v1.9) outranks the leader (v1.10): it asks, the leader resigns,
	// and the hand-over goes to it.
	res["older"] = campaignAsync(ctx, es["older"], "older")
	etcdtest.Within(t, tf.EndRequested(), 5*time.Second, "the leader being asked to end its term")
	r, ok := tf.EndRequest()
	if !ok || !strings.Contains(r.By, "/preferred/") {
		t.Fatalf("EndRequest = %+v, %v", r, ok)
	}
	if err := tf.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"older", "newer", "none", "low"} {
		term := await(t, res[v], 5*time.Second, v)
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// gracefulFailovers measures n hand-overs by Resign under Oldest between
// two candidates: the floor a Transfer compares with.
func gracefulFailovers(t *testing.T, cli *clientv3.Client, n int) []time.Duration {
	ctx := etcdtest.Context(t, 60*time.Second)
	x, y := newElection(t, cli, "failover-floor"), newElection(t, cli, "failover-floor")
	leader := await(t, campaignAsync(ctx, x, "x"), 5*time.Second, "x")
	es := map[string]*election.Election{"x": x, "y": y}
	other := campaignAsync(ctx, y, "y")
	var out []time.Duration
	for i := 0; i < n; i++ {
		etcdtest.WaitKeys(t, cli, x.Prefix(), 2)
		start := time.Now()
		if err := leader.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next := await(t, other, 5*time.Second, "next")
		out = append(out, time.Since(start))
		other = campaignAsync(ctx, es[leader.Value()], leader.Value())
		leader = next
	}
	_ = leader.Resign(ctx)
	_ = (<-other).term.Resign(ctx)
	return out
}

// A hand-over whose transaction applied but whose reply was lost is retried;
// the retry's compare fails, and its read must recognise the successor's
// key as the hand-over's own result (on etcd 3.7 a keys-only range returns
// no lease, so that read must not be keys-only). Forced: the leader's
// client applies its first hand-over transaction and reports it lost.
func TestTransferWhoseFirstAttemptAppliedUnheardSucceeds(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-unheard"
	var nextKey atomic.Value
	nextKey.Store("")
	var lost atomic.Bool
	icli := icptClient(t, func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ictx, method, req, reply, cc, opts...)
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && err == nil && putsKey(tr.Success, nextKey.Load().(string)) && lost.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "the reply was lost")
		}
		return err
	})
	a, b := preferred(t, icli, name), preferred(t, client(t), name)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	var next election.Candidate
	for _, c := range waitCandidates(t, a, 2) {
		if c.Value == "B" {
			next = c
		}
	}
	nextKey.Store(next.Key)
	if err := ta.Transfer(ctx, next.Key); err != nil {
		t.Fatalf("Transfer whose first attempt applied unheard = %v, want nil (B leads)", err)
	}
	if !lost.Load() {
		t.Fatal("no hand-over transaction went through the leader's client")
	}
	tb := await(t, bres, 5*time.Second, "B")
	if tb.Key() != next.Key {
		t.Fatalf("B leads with key %s, want %s", tb.Key(), next.Key)
	}
	_ = tb.Resign(ctx)
}
