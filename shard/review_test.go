package shard_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// memberPutClient is a client that calls onPut after each Txn that puts a
// key ending in suffix has been applied and answered, before the caller
// gets the answer: the place where a caller's ctx ending loses the reply.
func memberPutClient(t *testing.T, suffix string, onPut func(n int)) *clientv3.Client {
	t.Helper()
	var puts atomic.Int32
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if tr, ok := req.(*etcdserverpb.TxnRequest); ok && err == nil {
					for _, op := range tr.Success {
						if p := op.GetRequestPut(); p != nil && strings.HasSuffix(string(p.Key), suffix) {
							onPut(int(puts.Add(1)))
						}
					}
				}
				return err
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestRunEndingDuringJoinLeavesNoMemberKey: Run's ctx ends just after its
// join's put was applied (the reply arrives after the ctx ended, so the
// read that follows fails). Run returns, but must not leave its member key
// behind: a live member key on a lease that outlives the Run (a shared
// session) makes every other member give that member shards nobody runs.
func TestRunEndingDuringJoinLeavesNoMemberKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := memberPutClient(t, "/m/a", func(int) { cancel() })
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	g := newGroup(t, cli, "review-join-cancel", 4, shard.WithSession(sess))
	err = g.Run(ctx, "a", func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if keys := etcdtest.Keys(t, client(t), g.Prefix()+"m/"); len(keys) != 0 {
		t.Errorf("Run returned but left its member key behind: %v", keys)
	}
	if ms, err := g.Members(etcdtest.Context(t, 5*time.Second)); err != nil || len(ms) != 0 {
		t.Errorf("members after Run returned: %v (%v), want none", ms, err)
	}
}

// TestRunEndingDuringRejoinLeavesNoMemberKey: the same for the rejoin after
// a lost lease: the member's lease is revoked, the loop joins again on the
// session's next lease, and Run's ctx ends just after that put applied.
func TestRunEndingDuringRejoinLeavesNoMemberKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	cli := memberPutClient(t, "/m/a", func(n int) {
		if n == 2 { // the rejoin's put
			once.Do(cancel)
		}
	})
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	g := newGroup(t, cli, "review-rejoin-cancel", 4, shard.WithSession(sess))
	m := &member{name: "a", g: g, cancel: cancel, done: make(chan error, 1), owned: map[int]*shard.Shard{}, log: &eventLog{}}
	go func() { m.done <- g.Run(ctx, "a", m.work(nil)) }()
	t.Cleanup(func() { m.stop(t) })
	settled(t, g, "a")
	if _, err := client(t).Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-m.done:
		close(m.done)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
	if keys := etcdtest.Keys(t, client(t), g.Prefix()+"m/"); len(keys) != 0 {
		t.Errorf("Run returned but left its member key behind: %v", keys)
	}
}

// blockingTP is a tracer provider whose spans record, and whose AddEvent
// calls block(name): a pause point inside the session, which adds a
// renewal failure's event to every hold's span under the lease's lock of
// its holds.
type blockingTP struct {
	embedded.TracerProvider
	block func(name string)
}

func (p blockingTP) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return blockingTracer{block: p.block}
}

type blockingTracer struct {
	embedded.Tracer
	block func(name string)
}

func (t blockingTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := &blockingSpan{block: t.block}
	return trace.ContextWithSpan(ctx, s), s
}

type blockingSpan struct {
	noop.Span
	block func(name string)
}

func (s *blockingSpan) IsRecording() bool                            { return true }
func (s *blockingSpan) AddEvent(name string, _ ...trace.EventOption) { s.block(name) }

// TestLostLeaseEndsShardsAsLostNotMoved (rule 2's cause): a member cut off
// from etcd loses its lease at the validity deadline. Its loop hears of the
// lease's end (its AfterFunc) independently of the session ending the
// lease's holds; when the loop reconciles first, the member is out of its
// own assignment and must still end its shards with the lease's cause
// (ErrLost), not ErrMoved: nothing moved them, and the key may outlive
// the work by the rest of the TTL. The session's ending of the holds is
// held back by blocking the first renewal failure's span event (taken
// under the lease's lock of its holds) until the loop ended a shard as
// moved, or every shard ended.
func TestLostLeaseEndsShardsAsLostNotMoved(t *testing.T) {
	pcli, proxy := srv.Proxied(t)
	const n = 4
	log := &eventLog{}
	var armed atomic.Bool
	moving := make(chan struct{})
	var movingOnce, blockOnce sync.Once
	ended := func() int {
		c := 0
		for _, e := range log.snapshot() {
			if e.member == "a" && e.kind == "ended" {
				c++
			}
		}
		return c
	}
	tp := blockingTP{block: func(name string) {
		if !armed.Load() || name != "baton.renewal.failed" {
			return
		}
		blockOnce.Do(func() {
			deadline := time.Now().Add(10 * time.Second)
			for ended() < n && time.Now().Before(deadline) {
				select {
				case <-moving:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}}
	g := newGroup(t, pcli, "review-lost-cause", n, shard.WithTTL(3*time.Second), shard.WithTracerProvider(tp))
	shard.SetHooks(g, shard.Hooks{Moving: func(int) {
		if armed.Load() {
			movingOnce.Do(func() { close(moving) })
		}
	}})
	m := start(t, g, "a", log, nil)
	settled(t, g, "a")
	waitFor(t, func() bool { return m.count() == n }, "a's work on every shard")
	armed.Store(true)
	proxy.Blackhole()
	waitFor(t, func() bool { return ended() == n }, "every shard of the cut-off member to end")
	for _, e := range log.snapshot() {
		if e.member == "a" && e.kind == "ended" && !errors.Is(e.cause, shard.ErrLost) {
			t.Errorf("shard %d of a member whose lease was lost ended with %v, want ErrLost", e.shard, e.cause)
		}
	}
	proxy.Restore()
}

// TestRunRetainsNothingOnASharedLease: a Run that returned on a shared
// session leaves nothing registered on the session's lease. Each Run
// registered a context.AfterFunc on its lease's Context (to reconcile when
// the lease ends) and never unregistered it, so the lease kept every ended
// Run alive (its view of N shards, its fn and what fn holds) until the
// lease ended, and each later lease end still started a goroutine for it.
func TestRunRetainsNothingOnASharedLease(t *testing.T) {
	cli := client(t)
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	var finalized atomic.Bool
	func() {
		g := newGroup(t, cli, "review-retain", 4, shard.WithSession(sess))
		sentinel := new([64]byte)
		runtime.SetFinalizer(sentinel, func(*[64]byte) { finalized.Store(true) })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- g.Run(ctx, "a", func(ctx context.Context, s *shard.Shard) error {
				_ = sentinel[0]
				<-ctx.Done()
				return nil
			})
		}()
		settled(t, g, "a")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !finalized.Load() && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if !finalized.Load() {
		t.Fatal("a Run that returned (its Group closed) is still reachable while the shared session's lease lives")
	}
}
