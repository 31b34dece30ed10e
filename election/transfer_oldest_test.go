package election_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/history"
)

// queued is a candidate leadThenQueue queues: its election, value and,
// if not nil, its own Campaign context.
type queued struct {
	e   *election.Election
	v   string
	ctx context.Context
}

// leadThenQueue campaigns with leader first and, once it leads, queues each
// of ws in turn; it returns the leader's term, the waiters' results and
// the candidates in queue order.
func leadThenQueue(t *testing.T, ctx context.Context, leader *election.Election, lv string, ws ...queued) (*election.Term, []<-chan campaignResult, []election.Candidate) {
	t.Helper()
	term := await(t, campaignAsync(ctx, leader, lv), 5*time.Second, lv)
	var res []<-chan campaignResult
	for i, w := range ws {
		res = append(res, campaignAsync(cmp.Or(w.ctx, ctx), w.e, w.v))
		waitCandidates(t, leader, i+2)
	}
	return term, res, waitCandidates(t, leader, len(ws)+1)
}

// oldestHistory is an Oldest election's history as etcd recorded it: the
// leader (the live key with the smallest CreateRevision) after every
// revision where it changed, and every revision without a live key between
// two leaders.
type oldestHistory struct {
	leaders []history.Event // the leader key's put, Rev the revision it led from
	gaps    []string
}

func (h oldestHistory) values() []string {
	v := make([]string, len(h.leaders))
	for i, l := range h.leaders {
		v[i] = l.Value
	}
	return v
}

func readOldest(t *testing.T, cli *clientv3.Client, prefix string, from int64) oldestHistory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := history.Record(ctx, cli, strings.TrimSuffix(prefix, "/"), from)
	if err != nil {
		t.Fatal(err)
	}
	var h oldestHistory
	live := map[string]history.Event{}
	var leader string
	var leaderCreate int64
	emptySince := int64(-1)
	for i := 0; i < len(all); {
		rev := all[i].Rev
		for ; i < len(all) && all[i].Rev == rev; i++ {
			ev := all[i]
			if !strings.HasPrefix(ev.Key, prefix) {
				continue
			}
			if ev.Delete {
				delete(live, ev.Key)
			} else if old, ok := live[ev.Key]; !ok || old.Create != ev.Create {
				live[ev.Key] = ev
			}
		}
		var first history.Event
		for _, ev := range live {
			if first.Key == "" || ev.Create < first.Create {
				first = ev
			}
		}
		switch {
		case first.Key == "":
			if leader != "" && emptySince < 0 {
				emptySince = rev
			}
		case first.Key != leader || first.Create != leaderCreate:
			if emptySince >= 0 {
				h.gaps = append(h.gaps, fmt.Sprintf("revs %d..%d without a leader before %s", emptySince, rev-1, first.Value))
			}
			emptySince = -1
			leader, leaderCreate = first.Key, first.Create
			first.Rev = rev // the revision it leads from
			h.leaders = append(h.leaders, first)
		default:
			emptySince = -1
		}
	}
	return h
}

// Under Oldest, a Transfer past the next candidate hands over to the named
// one in one transaction: C leads, A's term ended first, B never leads in
// between and leads after C, each token greater than the one before.
// With a lock-delay the waiters confirm by writing their record: the
// skipped one must not take the leader's deletion for its turn either.
func TestTransferUnderOldestPastTheNext(t *testing.T) {
	t.Run("plain", func(t *testing.T) { transferPastTheNext(t, "transfer-oldest") })
	t.Run("lock-delay", func(t *testing.T) {
		transferPastTheNext(t, "transfer-oldest-delay", election.WithLockDelay(2*time.Second))
	})
}

func transferPastTheNext(t *testing.T, name string, opts ...election.Option) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	a, b, c := newElection(t, cli, name, opts...), newElection(t, client(t), name, opts...), newElection(t, client(t), name, opts...)
	from := revNow(t, cli)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := b.Observe(octx)
	if l := <-obs; l.Value != "A" {
		t.Fatalf("Observe's first state names %q, want A", l.Value)
	}

	if err := ta.Transfer(ctx, cands[2].Key); err != nil {
		t.Fatalf("Transfer past B = %v", err)
	}
	if cause := context.Cause(ta.Context()); !errors.Is(cause, election.ErrTransferred) {
		t.Fatalf("A's cause = %v, want ErrTransferred", cause)
	}
	tc := await(t, cres, 5*time.Second, "C")
	if tc.Token() <= ta.Token() {
		t.Fatalf("C's token %d not after A's %d", tc.Token(), ta.Token())
	}
	if l, err := a.Leader(ctx); err != nil || l.Value != "C" || l.Token != tc.Token() {
		t.Fatalf("Leader = %+v, %v; want C with token %d", l, err, tc.Token())
	}
	select {
	case l := <-obs:
		if l.Value != "C" {
			t.Fatalf("Observe after the hand-over names %q, want C", l.Value)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not report C")
	}
	// B waits on, now behind C.
	cands = waitCandidates(t, a, 2)
	if cands[0].Value != "C" || cands[1].Value != "B" {
		t.Fatalf("candidates after the hand-over = %+v, want C then B", cands)
	}
	notYet(t, bres, "B")
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bres, 5*time.Second, "B")
	if tb.Token() <= tc.Token() {
		t.Fatalf("B's token %d not after C's %d", tb.Token(), tc.Token())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	h := readOldest(t, cli, a.Prefix(), from)
	if got := strings.Join(h.values(), " "); got != "A C B" {
		t.Fatalf("leaders in etcd's history: %s, want A C B", got)
	}
	if len(h.gaps) > 0 {
		t.Fatalf("revisions without a leader: %v", h.gaps)
	}
	if keys := etcdtest.Keys(t, cli, a.Prefix()); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// A plain etcd candidate waiting in the election would take its key's
// deletion for a loss, or lead beside the successor: Transfer past it, or
// past anyone while it waits, is refused naming it, and the term goes on.
func TestTransferUnderOldestRefusedWithAnEtcdCandidate(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-foreign"
	a, c := newElection(t, cli, name), newElection(t, client(t), name)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	s, err := concurrency.NewSession(client(t), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ee := concurrency.NewElection(s, strings.TrimSuffix(a.Prefix(), "/"))
	eres := make(chan error, 1)
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	go func() { eres <- ee.Campaign(ectx, "etcd") }()
	waitCandidates(t, a, 2)
	cres := campaignAsync(ctx, c, "C")
	cands := waitCandidates(t, a, 3)
	err = ta.Transfer(ctx, cands[2].Key)
	if !errors.Is(err, election.ErrForeignCandidate) || !strings.Contains(err.Error(), cands[1].Key) {
		t.Fatalf("Transfer past an etcd candidate = %v, want ErrForeignCandidate naming %s", err, cands[1].Key)
	}
	if !ta.IsLeader() {
		t.Fatal("A's term ended after a refused transfer")
	}
	if l, err := a.Leader(ctx); err != nil || l.Key != ta.Key() {
		t.Fatalf("Leader = %+v, %v; want A", l, err)
	}
	if got := len(waitCandidates(t, a, 3)); got != 3 {
		t.Fatalf("%d candidates, want 3", got)
	}
	// To the next one (the etcd candidate itself) a plain resign is enough:
	// etcd's own rule makes it the leader.
	if err := ta.Transfer(ctx, cands[1].Key); err != nil {
		t.Fatalf("Transfer to the etcd candidate next in line = %v", err)
	}
	select {
	case err := <-eres:
		if err != nil {
			t.Fatalf("etcd candidate's Campaign = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the etcd candidate did not lead")
	}
	notYet(t, cres, "C")
	if err := ee.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	_ = await(t, cres, 5*time.Second, "C").Resign(ctx)
}

// The target leaves after it was checked and before the transaction: the
// transaction's guard fails, A's term ended (it had ended before the
// transaction, as documented) and resigned, B leads next; never two
// leaders, and C never leads.
func TestTransferUnderOldestToATargetThatDies(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-dies"
	a, b := newElection(t, cli, name), newElection(t, client(t), name)
	c := newElection(t, client(t), name)
	from := revNow(t, cli)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C", ctx: cctx})
	bres, cres := res[0], res[1]
	election.SetHandOverHook(a, func(string) {
		ccancel()
		<-cres
		etcdtest.WaitKeys(t, cli, a.Prefix(), 2) // C's key is gone
	})
	err := ta.Transfer(ctx, cands[2].Key)
	if !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to a candidate that left = %v, want ErrNoCandidate", err)
	}
	if ta.IsLeader() || !errors.Is(context.Cause(ta.Context()), election.ErrTransferred) {
		t.Fatalf("A: leader %v, cause %v; want its term ended by the hand-over", ta.IsLeader(), context.Cause(ta.Context()))
	}
	tb := await(t, bres, 5*time.Second, "B")
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	h := readOldest(t, cli, a.Prefix(), from)
	if got := strings.Join(h.values(), " "); got != "A B" {
		t.Fatalf("leaders in etcd's history: %s, want A B", got)
	}
	if keys := etcdtest.Keys(t, cli, a.Prefix()); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// A skipped candidate whose Campaign ends while its key is moved leaves
// neither its key nor its mark.
func TestTransferUnderOldestSkippedCandidateLeaves(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "transfer-skipped-leaves"
	a, b, c := newElection(t, cli, name), newElection(t, client(t), name), newElection(t, client(t), name)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B", ctx: bctx}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	election.SetHandOverHook(a, func(string) { bcancel() })
	if err := ta.Transfer(ctx, cands[2].Key); err != nil {
		t.Fatalf("Transfer = %v", err)
	}
	select {
	case r := <-bres:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("B's Campaign = %v, want context.Canceled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B's Campaign did not end")
	}
	tc := await(t, cres, 5*time.Second, "C")
	waitCandidates(t, a, 1)
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ns := "/" + strings.Split(strings.TrimPrefix(a.Prefix(), "/"), "/")[0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for _, k := range etcdtest.Keys(t, cli, ns) {
			if strings.Contains(k, name) {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left: %v", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// 100 hand-overs between A and C, run by Run, B waiting all along: the
// one handed over campaigns again by itself and is the next target, and B
// never leads, as etcd's history shows.
func TestTransferUnderOldestHundredTimesPastB(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	cli := client(t)
	ctx := etcdtest.Context(t, 90*time.Second)
	const name = "transfer-hundred"
	a, b, c := newElection(t, cli, name), newElection(t, client(t), name), newElection(t, client(t), name)
	from := revNow(t, cli)
	terms := make(chan *election.Term, 4)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	runs := make(chan error, 2)
	run := func(e *election.Election, v string) {
		go func() {
			runs <- e.Run(rctx, v, func(ctx context.Context, t *election.Term) error {
				terms <- t
				<-ctx.Done()
				return nil
			})
		}()
	}
	run(a, "A")
	cur := <-terms
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bres := campaignAsync(bctx, b, "B")
	waitCandidates(t, a, 2)
	run(c, "C")
	for i := range rounds {
		cands := waitCandidates(t, a, 3)
		var to string
		for _, cd := range cands {
			if cd.Value != "B" && cd.Value != cur.Value() {
				to = cd.Key
			}
		}
		if to == "" {
			t.Fatalf("round %d: no target among %+v", i, cands)
		}
		if err := cur.Transfer(ctx, to); err != nil {
			t.Fatalf("round %d: Transfer from %s = %v", i, cur.Value(), err)
		}
		next := <-terms
		if next.Key() != to || next.Token() <= cur.Token() {
			t.Fatalf("round %d: %s leads (token %d) after %s (token %d), want %s", i, next.Value(), next.Token(), cur.Value(), cur.Token(), to)
		}
		cur = next
	}
	until := revNow(t, cli)
	notYet(t, bres, "B")
	rcancel()
	for range 2 {
		if err := <-runs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	}
	_ = await(t, bres, 5*time.Second, "B").Resign(ctx)
	h := readOldest(t, cli, a.Prefix(), from)
	var n int
	for _, l := range h.leaders {
		if l.Rev > until {
			break
		}
		if l.Value == "B" {
			t.Fatalf("B led at revision %d: %v", l.Rev, h.leaders)
		}
		n++
	}
	if n != rounds+1 {
		t.Fatalf("%d leaders before revision %d, want %d: %v", n, until, rounds+1, h.values())
	}
	if len(h.gaps) > 0 {
		t.Fatalf("revisions without a leader: %v", h.gaps)
	}
}

// Thirty hand-overs past B, each on a fresh election: whichever way B's
// wait hears of the leader's release (following the namespace's watch, or
// a watch of the key ahead when that watch is not live yet), B never takes
// it for its turn, although the same revision carries the release mark.
func TestTransferUnderOldestSkippedNeverTakesTheRelease(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	for i := range rounds {
		cli := client(t)
		ctx := etcdtest.Context(t, 30*time.Second)
		name := fmt.Sprintf("transfer-release-%d", i)
		a, b, c := newElection(t, cli, name), newElection(t, client(t), name), newElection(t, client(t), name)
		ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
		bres, cres := res[0], res[1]
		if err := ta.Transfer(ctx, cands[2].Key); err != nil {
			t.Fatal(err)
		}
		tc := await(t, cres, 5*time.Second, "C")
		if cs := waitCandidates(t, a, 2); cs[1].Value != "B" {
			t.Fatalf("round %d: candidates %+v, want C then B", i, cs)
		}
		notYet(t, bres, "B")
		_ = tc.Resign(ctx)
		_ = await(t, bres, 5*time.Second, "B").Resign(ctx)
	}
}
