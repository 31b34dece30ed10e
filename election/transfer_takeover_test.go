package election_test

// Transfer against takeovers, late writes and the term's own context:
// each test forces its interleaving with a client interceptor or a hook.

import (
	"context"
	"errors"
	"slices"
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

// icptClient is a client of srv whose unary calls pass through f first.
func icptClient(t *testing.T, f grpc.UnaryClientInterceptor) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(f)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// putsKey reports whether a transaction (nested ones included) puts key.
func putsKey(ops []*etcdserverpb.RequestOp, key string) bool {
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil && string(p.Key) == key {
			return true
		}
		if n := op.GetRequestTxn(); n != nil && (putsKey(n.Success, key) || putsKey(n.Failure, key)) {
			return true
		}
	}
	return false
}

// comparesMod reports whether a transaction compares key's ModRevision
// (transferOldest's guard against a takeover).
func comparesMod(tr *etcdserverpb.TxnRequest, key string) bool {
	for _, c := range tr.Compare {
		if c.Target == etcdserverpb.Compare_MOD && string(c.Key) == key {
			return true
		}
	}
	return false
}

// Transfer to the next candidate, which leaves after the check: the
// guarded transaction fails and Transfer resigns instead, as Resign does,
// with the lock-delay record: the candidate after it waits out no delay.
func TestTransferNoCandidateLeavesNoLockDelay(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-nocand-delay"
	const d = 4 * time.Second
	a := newElection(t, cli, name, election.WithLockDelay(d))
	c := newElection(t, client(t), name, election.WithLockDelay(d))
	b := newElection(t, client(t), name, election.WithLockDelay(d))
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: c, v: "C", ctx: cctx}, queued{e: b, v: "B"})
	cres, bres := res[0], res[1]
	election.SetHandOverHook(a, func(string) {
		ccancel()
		<-cres
		etcdtest.WaitKeys(t, cli, a.Prefix(), 2) // C's key is gone
	})
	start := time.Now()
	err := ta.Transfer(ctx, cands[1].Key)
	t.Logf("Transfer = %v; the term's cause: %v", err, context.Cause(ta.Context()))
	if !errors.Is(err, election.ErrNoCandidate) {
		t.Fatalf("Transfer to the next, which left = %v, want ErrNoCandidate", err)
	}
	tb := await(t, bres, 2*d, "B")
	took := time.Since(start)
	_ = tb.Resign(ctx)
	if took > d/2 {
		t.Fatalf("B led %v after Transfer resigned instead (lock-delay %v): the leader's delay record outlived its key and the delay ran as after a loss",
			took.Round(time.Millisecond), d)
	}
}

// A second Campaign through the leader's lease with the same value takes
// the key over between Transfer's check and its transaction (a takeover
// that writes nothing: the ModRevision guard cannot see it): the replaced
// Term's Transfer returns ErrNotLeader and the new Term leads on.
func TestTransferOfASameValueTakeoverHandsNothingOver(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-replaced-same"
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a1 := newElection(t, cli, name, election.WithSession(cs))
	a2 := newElection(t, cli, name, election.WithSession(cs))
	b, c := newElection(t, client(t), name), newElection(t, client(t), name)
	t1, res, cands := leadThenQueue(t, ctx, a1, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	var t2 *election.Term
	election.SetHandOverHook(a1, func(string) {
		t2 = await(t, campaignAsync(ctx, a2, "A"), 5*time.Second, "A (again)")
	})
	err = t1.Transfer(ctx, cands[2].Key)
	t.Logf("Transfer = %v; t1's cause: %v", err, context.Cause(t1.Context()))
	time.Sleep(300 * time.Millisecond)
	defer func() {
		_ = t2.Resign(ctx)
		for _, r := range []<-chan campaignResult{bres, cres} {
			select {
			case x := <-r:
				if x.term != nil {
					_ = x.term.Resign(ctx)
				}
			case <-time.After(5 * time.Second):
			}
		}
	}()
	if !errors.Is(err, election.ErrNotLeader) || !t2.IsLeader() {
		t.Fatalf("Transfer of a Term replaced (same value) before its transaction = %v; the new Term leads: %v (cause %v); want ErrNotLeader and the new Term left alone",
			err, t2.IsLeader(), context.Cause(t2.Context()))
	}
}

// A Proclaim whose reply was lost applies late, after Transfer read the
// state: the leader's key's ModRevision moves; it is the term's own write
// (no takeover can happen once the hand-over began), so Transfer hands
// over with it, leaving no key of an ended Term to lead.
func TestTransferAfterALateProclaimHandsOver(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-late-proclaim"
	var own atomic.Value // the leader's key, once it leads
	own.Store("")
	var armed atomic.Bool
	release, applied := make(chan struct{}), make(chan struct{})
	var cancelProclaim atomic.Pointer[context.CancelFunc]
	icpt := func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		tr, ok := req.(*etcdserverpb.TxnRequest)
		if ok && armed.Load() && putsKey(tr.Success, own.Load().(string)) {
			armed.Store(false)
			go func() { // sent late: after the caller gave up on it
				<-release
				_ = invoker(context.Background(), method, req, new(etcdserverpb.TxnResponse), cc, opts...)
				close(applied)
			}()
			(*cancelProclaim.Load())()
			return status.Error(codes.Canceled, "the Proclaim's ctx ended with the request in flight")
		}
		return invoker(ictx, method, req, reply, cc, opts...)
	}
	cli := client(t)
	a := newElection(t, icptClient(t, icpt), name)
	b, c := newElection(t, client(t), name), newElection(t, client(t), name)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	own.Store(ta.Key())
	pctx, pcancel := context.WithCancel(ctx)
	cancelProclaim.Store(&pcancel)
	armed.Store(true)
	if err := ta.Proclaim(pctx, "A2"); err == nil {
		t.Fatal("Proclaim returned nil; the interceptor did not fire")
	} else {
		t.Logf("Proclaim = %v (its put is still on its way)", err)
	}
	election.SetHandOverHook(a, func(string) { close(release); <-applied })
	err := ta.Transfer(ctx, cands[2].Key)
	t.Logf("Transfer = %v; the term's cause: %v", err, context.Cause(ta.Context()))
	if rerr := ta.Resign(ctx); rerr != nil {
		t.Logf("Resign after it = %v", rerr)
	}
	time.Sleep(2 * time.Second)
	keys := etcdtest.Keys(t, cli, a.Prefix())
	l, lerr := a.Leader(ctx)
	select {
	case r := <-bres:
		if r.term != nil {
			_ = r.term.Resign(ctx)
		}
		return // B led: not stuck
	case r := <-cres:
		if r.term != nil {
			_ = r.term.Resign(ctx)
		}
		return
	default:
	}
	if slices.Contains(keys, ta.Key()) {
		t.Fatalf("after Transfer = %v and Resign, the ended Term's key %s still leads (Leader() = %q, %v; keys %v; IsLeader %v): B and C wait for as long as A's Election is open",
			err, ta.Key(), l.Value, lerr, keys, ta.IsLeader())
	}
}

// A Campaign through the same lease during the hand-over (with the same
// value, so it would adopt the key without writing it) waits for the
// hand-over's transaction: it never takes the key over mid-way, Transfer
// hands over, and the second Campaign queues behind the successor.
func TestTransferSameLeaseCampaignMeanwhileWaits(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-window-same"
	var own atomic.Value
	own.Store("")
	var armed atomic.Bool
	var a2 *election.Election
	second := make(chan campaignResult, 1)
	icpt := func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && armed.Load() && comparesMod(tr, own.Load().(string)) {
			armed.Store(false)
			go func() {
				tt, err := a2.Campaign(ctx, "A")
				second <- campaignResult{tt, err, time.Now()}
			}()
			time.Sleep(200 * time.Millisecond) // time to take the key over, if it could
		}
		return invoker(ictx, method, req, reply, cc, opts...)
	}
	icli := icptClient(t, icpt)
	cs, err := concurrency.NewSession(icli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a1 := newElection(t, icli, name, election.WithSession(cs))
	a2 = newElection(t, icli, name, election.WithSession(cs))
	b, c := newElection(t, client(t), name), newElection(t, client(t), name)
	t1, res, cands := leadThenQueue(t, ctx, a1, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	own.Store(t1.Key())
	armed.Store(true)
	if err := t1.Transfer(ctx, cands[2].Key); err != nil {
		t.Fatalf("Transfer = %v", err)
	}
	tc := await(t, cres, 5*time.Second, "C")
	notYet(t, second, "the second Campaign")
	_ = tc.Resign(ctx)
	// B (put again once it heard of the hand-over) and the second Campaign
	// (queued once the transaction was done) queue in either order.
	for range 2 {
		select {
		case r := <-bres:
			_ = r.term.Resign(ctx)
		case r := <-second:
			if r.err != nil {
				t.Fatalf("the second Campaign = %v", r.err)
			}
			_ = r.term.Resign(ctx)
		case <-time.After(5 * time.Second):
			t.Fatal("B or the second Campaign did not lead after C resigned")
		}
	}
}

// Transfer with a ctx derived from the Term's Context (fn's ctx in Run,
// or t.Context() itself), which Transfer ends before its transaction: the
// transaction runs on a fresh bounded context, and hands over.
func TestTransferWithTheTermsContext(t *testing.T) {
	for _, past := range []bool{false, true} {
		name := "takeover-term-ctx-next"
		if past {
			name = "takeover-term-ctx-past"
		}
		t.Run(name, func(t *testing.T) {
			ctx := etcdtest.Context(t, 30*time.Second)
			a, b, c := newElection(t, client(t), name), newElection(t, client(t), name), newElection(t, client(t), name)
			ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
			bres, cres := res[0], res[1]
			to, want := cands[1].Key, bres
			if past {
				to, want = cands[2].Key, cres
			}
			err := ta.Transfer(ta.Context(), to) // as fn does in Run with its ctx
			defer func() {
				for _, r := range []<-chan campaignResult{bres, cres} {
					select {
					case x := <-r:
						if x.term != nil {
							_ = x.term.Resign(ctx)
						}
					case <-time.After(3 * time.Second):
					}
				}
			}()
			if err != nil {
				t.Fatalf("Transfer(term's Context, %s) = %v, want nil", to, err)
			}
			select {
			case r := <-want:
				if r.term != nil {
					_ = r.term.Resign(ctx)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the target did not lead")
			}
		})
	}
}

// The takeover (different value, so it writes the key) lands between
// Transfer's ended() check and its read of the state, so the ModRevision
// read is the new one: Transfer sees the Term's Context ended (not by
// itself) and hands nothing over.
func TestTransferAfterATakeoverBeforeTheReadHandsNothingOver(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-takeover-before-read"
	var armed atomic.Bool
	var a2 *election.Election
	var t2 atomic.Pointer[election.Term]
	prefix := "/baton/v1/election/" + name + "/"
	icpt := func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && armed.Load() && len(tr.Compare) == 0 && len(tr.Success) == 2 &&
			tr.Success[0].GetRequestRange() != nil && string(tr.Success[0].GetRequestRange().Key) == prefix {
			armed.Store(false)
			tt, err := a2.Campaign(ctx, "A2") // readState's read: the takeover just before it
			if err != nil {
				t.Errorf("the second Campaign = %v", err)
			} else {
				t2.Store(tt)
			}
		}
		return invoker(ictx, method, req, reply, cc, opts...)
	}
	icli := icptClient(t, icpt)
	cs, err := concurrency.NewSession(icli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a1 := newElection(t, icli, name, election.WithSession(cs))
	a2 = newElection(t, icli, name, election.WithSession(cs))
	b, c := newElection(t, client(t), name), newElection(t, client(t), name)
	t1, res, cands := leadThenQueue(t, ctx, a1, "A1", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	bres, cres := res[0], res[1]
	armed.Store(true)
	err = t1.Transfer(ctx, cands[2].Key)
	tt2 := t2.Load()
	if tt2 == nil {
		t.Fatalf("the second Campaign did not run (Transfer = %v)", err)
	}
	t.Logf("Transfer = %v; t1's cause: %v", err, context.Cause(t1.Context()))
	time.Sleep(500 * time.Millisecond)
	defer func() {
		_ = tt2.Resign(ctx)
		for _, r := range []<-chan campaignResult{bres, cres} {
			select {
			case x := <-r:
				if x.term != nil {
					_ = x.term.Resign(ctx)
				}
			case <-time.After(5 * time.Second):
			}
		}
	}()
	if !errors.Is(err, election.ErrNotLeader) || !tt2.IsLeader() {
		t.Fatalf("Transfer of a Term replaced just before its read = %v; the new Term leads: %v (cause %v); want ErrNotLeader and the new Term left alone",
			err, tt2.IsLeader(), context.Cause(tt2.Context()))
	}
}

// 6b. The same under Preferred (handTo also cancels the Term's Context
// before its transaction): not new in 81c6342, listed for the fix's scope.
func TestTransferWithTheTermsContextPreferred(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "takeover-term-ctx-pref"
	opt := election.WithStrategy(election.Preferred)
	a, b := newElection(t, client(t), name, opt), newElection(t, client(t), name, opt)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	cands := waitCandidates(t, a, 2)
	err := ta.Transfer(ta.Context(), cands[1].Key)
	tb := await(t, bres, 5*time.Second, "B")
	_ = tb.Resign(ctx)
	if err != nil {
		t.Fatalf("Transfer(term's Context) under Preferred = %v, want nil", err)
	}
}
