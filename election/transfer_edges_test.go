package election_test

// Edges of Transfer under Oldest past the next candidate: each test forces
// an interleaving (a lost reply, a wait on its own watch, a takeover, a
// target that leaves) that once went wrong.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// skippedOwnWatch: A leads, B waits (on its watch of A's key), C waits; A
// transfers to C. B must wait on and lead after C. (B once waited on a
// watch of its own only when its session's namespace watch had moved past
// its read; every wait watches the key ahead alone now.)
func skippedOwnWatch(t *testing.T, name string, opts ...election.Option) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	a := newElection(t, cli, name, opts...)
	bcli := client(t)
	b := newElection(t, bcli, name, opts...)
	c := newElection(t, client(t), name, opts...)
	ta, res, _ := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"})
	bres := res[0]
	time.Sleep(300 * time.Millisecond) // B's hook ran, B waits
	cres := campaignAsync(ctx, c, "C")
	cands := waitCandidates(t, a, 3)
	if err := ta.Transfer(ctx, cands[2].Key); err != nil {
		t.Fatalf("Transfer past B = %v", err)
	}
	tc := await(t, cres, 5*time.Second, "C")
	time.Sleep(time.Second)
	select {
	case r := <-bres:
		t.Fatalf("the skipped B's Campaign returned (term %v) with %v while C leads; want it to wait on; keys now %v",
			r.term != nil, r.err, etcdtest.Keys(t, cli, "/baton/v1/candidate/"+name+"/"))
	default:
	}
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bres, 5*time.Second, "B")
	_ = tb.Resign(ctx)
}

// A skipped waiter on its own watch confirms its key after the deletion
// it saw, finds it moved, and waits on.
func TestTransferEdgeSkippedWaiterOnItsOwnWatch(t *testing.T) {
	skippedOwnWatch(t, "edge-own-watch")
}

// With WithLockDelay too (whose waiters otherwise let the record's write
// confirm): a watch of A's key alone does not show B's own key gone, so B
// reads it, finds it moved and waits on, leaving no mark.
func TestTransferEdgeSkippedLockDelayedWaiterOnItsOwnWatch(t *testing.T) {
	skippedOwnWatch(t, "edge-own-watch-delay", election.WithLockDelay(2*time.Second))
}

// lostReplyClient is a client whose first moved transaction (the skipped
// waiter's re-put of its key) applies, but whose reply is lost while the
// caller's ctx ends: cancel is called after the apply and Canceled returned.
func lostReplyClient(t *testing.T, cancel func()) *clientv3.Client {
	var fired atomic.Bool
	icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		tr, ok := req.(*etcdserverpb.TxnRequest)
		if !ok || err != nil || fired.Load() {
			return err
		}
		moved := false
		for _, c := range tr.Compare {
			if strings.Contains(string(c.Key), "/moved/") {
				moved = true
			}
		}
		if moved && len(tr.Success) == 2 && tr.Success[0].GetRequestPut() != nil && reply.(*etcdserverpb.TxnResponse).Succeeded {
			fired.Store(true)
			cancel()
			return status.Error(codes.Canceled, "review: the reply was lost as the caller's ctx ended")
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(icpt)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// The skipped waiter's moved transaction applies, but its Campaign's ctx
// ends before the reply arrives: the failed wait deletes the key put again
// too (on its lease, newer than the one it knew), so no candidate nobody
// waits for is left to block the election, and D leads after C.
func TestTransferEdgeMovedReplyLostLeavesNoPhantomCandidate(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-moved-lost"
	a := newElection(t, cli, name)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	b := newElection(t, lostReplyClient(t, bcancel), name)
	c := newElection(t, client(t), name)
	d := newElection(t, client(t), name)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B", ctx: bctx}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	if err := ta.Transfer(ctx, cands[2].Key); err != nil {
		t.Fatalf("Transfer past B = %v", err)
	}
	tc := await(t, cres, 5*time.Second, "C")
	select {
	case r := <-bres:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("B's Campaign = %v, want context.Canceled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B's Campaign did not end")
	}
	time.Sleep(500 * time.Millisecond) // B's cleanup
	keys := etcdtest.Keys(t, cli, a.Prefix())
	if len(keys) != 1 {
		t.Errorf("after B's Campaign failed: election keys %v, want C's alone", keys)
	}
	dres := campaignAsync(ctx, d, "D")
	waitCandidates(t, a, len(keys)+1)
	if err := tc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-dres:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.term.Resign(ctx)
	case <-time.After(3 * time.Second):
		l, err := a.Leader(ctx)
		t.Fatalf("D did not lead within 3 s of C's Resign; Leader() = %q (key %s), %v: a phantom candidate of B's blocks the election while B's Election is open",
			l.Value, l.Key, err)
	}
}

// The leader's key is deleted (an operator's `baton resign --force`, or its
// lease expiring) after Transfer checked the target and before its
// transaction: the guard fails on the first attempt, nothing was handed
// over and B, the next, leads; Transfer says so (ErrNotLeader), never that
// C leads.
func TestTransferEdgeTransferFailsWhenItsKeyWentFirst(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-key-went-first"
	a, b, c := newElection(t, cli, name), newElection(t, client(t), name), newElection(t, client(t), name)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	election.SetHandOverHook(a, func(string) {
		if _, err := client(t).Delete(context.Background(), ta.Key()); err != nil { // the operator's force
			t.Error(err)
		}
	})
	err := ta.Transfer(ctx, cands[2].Key)
	tb := await(t, bres, 5*time.Second, "B")
	defer func() { _ = tb.Resign(ctx) }()
	notYet(t, cres, "C")
	if !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Transfer to C = %v, want ErrNotLeader: B leads (token %d) and C waits", err, tb.Token())
	}
}

// Transfer to the next candidate, which leaves after the check: the one
// after it (B) leads, and Transfer returns an error wrapping
// ErrNoCandidate, as documented.
func TestTransferEdgeTransferToTheNextThatLeaves(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-next-leaves"
	a, c, b := newElection(t, cli, name), newElection(t, client(t), name), newElection(t, client(t), name)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: c, v: "C", ctx: cctx}, queued{e: b, v: "B"})
	cres, bres := res[0], res[1]
	election.SetHandOverHook(a, func(string) {
		ccancel()
		<-cres
		etcdtest.WaitKeys(t, cli, a.Prefix(), 2) // C's key is gone
	})
	err := ta.Transfer(ctx, cands[1].Key)
	tb := await(t, bres, 5*time.Second, "B")
	_ = tb.Resign(ctx)
	if !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to the next candidate, which left = %v, want ErrNoCandidate (B leads)", err)
	}
}

// A second Campaign through the leader's lease takes its key over while
// the leader's Transfer is between its check and its transaction (a
// takeover keeps the key's CreateRevision, not its ModRevision): the
// replaced Term's Transfer returns ErrNotLeader and the new Term leads on.
func TestTransferEdgeTransferOfAReplacedTermLeavesTheNewOne(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-replaced"
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a1 := newElection(t, cli, name, election.WithSession(cs))
	a2 := newElection(t, cli, name, election.WithSession(cs))
	b, c := newElection(t, client(t), name), newElection(t, client(t), name)
	t1, res, cands := leadThenQueue(t, ctx, a1, "A1", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	var t2 *election.Term
	election.SetHandOverHook(a1, func(string) {
		t2 = await(t, campaignAsync(ctx, a2, "A2"), 5*time.Second, "A2")
	})
	err = t1.Transfer(ctx, cands[2].Key)
	if !errors.Is(err, election.ErrNotLeader) {
		t.Errorf("Transfer of a Term replaced before its transaction = %v; want ErrNotLeader and the new Term left alone", err)
	}
	if l, lerr := a1.Leader(ctx); lerr != nil || l.Value != "A2" || !t2.IsLeader() {
		t.Fatalf("Leader = %+v, %v; the new Term leads: %v (%v)", l, lerr, t2.IsLeader(), context.Cause(t2.Context()))
	}
	notYet(t, bres, "B")
	notYet(t, cres, "C")
	_ = t2.Resign(ctx)
	_ = await(t, bres, 5*time.Second, "B").Resign(ctx)
	_ = await(t, cres, 5*time.Second, "C").Resign(ctx)
}

// A candidate of the release before moves (it wrote an oldest/ record
// when it set a candidate option, without "moves") is not baton's for a
// hand-over: it would take the skip for a loss. Its record is planted as
// that release wrote it, beside an etcd candidate's key.
func TestTransferEdgeOlderBatonCandidateIsNotSkipped(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-older-baton"
	a, c := newElection(t, cli, name), newElection(t, client(t), name)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	s, err := concurrency.NewSession(client(t), concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := fmt.Sprintf("/baton/v1/candidate/%s/oldest/%x", name, int64(s.Lease()))
	if _, err := cli.Put(ctx, rec, `{"value":"OLD","priority":0,"version":"v1","strategy":"oldest"}`, clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	ee := concurrency.NewElection(s, strings.TrimSuffix(a.Prefix(), "/"))
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	eres := make(chan error, 1)
	go func() { eres <- ee.Campaign(ectx, "OLD") }()
	waitCandidates(t, a, 2)
	cres := campaignAsync(ctx, c, "C")
	cands := waitCandidates(t, a, 3)
	if err := ta.Transfer(ctx, cands[2].Key); !errors.Is(err, election.ErrForeignCandidate) {
		t.Fatalf("Transfer past an older release's candidate = %v, want ErrForeignCandidate", err)
	}
	if !ta.IsLeader() {
		t.Fatal("the term ended after a refused transfer")
	}
	_ = ta.Resign(ctx)
	if err := <-eres; err != nil {
		t.Fatalf("the older candidate, next in line, did not lead: %v", err)
	}
	_ = ee.Resign(ctx)
	_ = await(t, cres, 10*time.Second, "C").Resign(ctx)
}

// With WithLockDelay, Transfer to the next candidate (also Run's hand-over
// and `baton resign --to` the next) deletes the leader's lock-delay record
// with its key, as Resign does: the successor waits out no delay.
func TestTransferEdgeTransferToTheNextWaitsOutNoLockDelay(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "edge-next-delay"
	const d = 3 * time.Second
	a, b := newElection(t, cli, name, election.WithLockDelay(d)), newElection(t, client(t), name, election.WithLockDelay(d))
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	cands := waitCandidates(t, a, 2)
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := ta.Transfer(ctx, cands[1].Key); err != nil {
		t.Fatal(err)
	}
	tb := await(t, bres, 10*time.Second, "B")
	took := time.Since(start)
	_ = tb.Resign(ctx)
	if took > d/2 {
		t.Fatalf("B led %v after a graceful Transfer to it (lock-delay %v): the delay ran as after a loss", took.Round(time.Millisecond), d)
	}
}
