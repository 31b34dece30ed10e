package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
)

// gatedClient holds its first n transactions until open is called, and
// counts every transaction it sends.
func gatedClient(t *testing.T, n int) (cli *clientv3.Client, held func() int, sent func() int, open func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	cli, sent = txnClient(t, func(i int) <-chan struct{} {
		if i <= n {
			return gate
		}
		return nil
	})
	return cli, func() int { return min(sent(), n) }, sent, open
}

// txnClient is an etcd client whose i-th transaction (from 1) waits,
// before it is sent, until the channel wait(i) returns is closed (not at
// all for nil); sent counts the transactions.
func txnClient(t *testing.T, wait func(i int) <-chan struct{}) (cli *clientv3.Client, sent func() int) {
	t.Helper()
	var mu sync.Mutex
	total := 0
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Txn" {
					mu.Lock()
					total++
					i := total
					mu.Unlock()
					if g := wait(i); g != nil {
						<-g
					}
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, func() int { mu.Lock(); defer mu.Unlock(); return total }
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type enqueued struct {
	resp *clientv3.TxnResponse
	err  error
}

// Enqueues sent while a session's slots are all in flight go together, as
// one transaction when they fit one, and each answer is what it would
// have been alone: its own key put at the whole's revision and the read
// of its own queue; an enqueue of a queue already in the group waits for
// the next one, so that two keys of one queue never share a revision.
func TestBatcherSendsWhatQueuedAsOneTransaction(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli, held, sent, open := gatedClient(t, queue.MaxInflight)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	b := queue.NewBatcher(cli, ctx, func(fn func()) bool { wg.Go(fn); return true })
	base := fmt.Sprintf("/batch-%d/v1/mutex/", time.Now().UnixNano())
	var f queue.Fence
	const n = 20
	res := make([]enqueued, n+1)
	var calls sync.WaitGroup
	enqueue := func(i int, name string) {
		calls.Go(func() {
			prefix := base + name + "/"
			key := fmt.Sprintf("%s%x-%d", prefix, g.ID, i)
			resp, _, err := queue.Enqueue(ctx, cli, b, &f, queue.FenceKey(prefix, g.ID), g.ID, key, "v", prefix, nil, nil)
			res[i] = enqueued{resp, err}
		})
	}
	for i := range queue.MaxInflight {
		enqueue(i, fmt.Sprintf("direct-%d", i))
	}
	waitUntil(t, func() bool { return held() == queue.MaxInflight }, "the direct enqueues in flight")
	for i := queue.MaxInflight; i < n; i++ {
		enqueue(i, fmt.Sprintf("grouped-%d", i))
	}
	enqueue(n, fmt.Sprintf("grouped-%d", n-1)) // the same queue as the last
	waitUntil(t, func() bool { return queue.Queued(b) == n+1-queue.MaxInflight }, "the others queued")
	open()
	calls.Wait()
	if got, want := sent(), queue.MaxInflight+2; got != want {
		t.Errorf("%d transactions sent for %d enqueues, want %d: %d alone, then one group, then the one of a queue already in it", got, n+1, want, queue.MaxInflight)
	}
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("enqueue %d: %v", i, r.err)
		}
	}
	groupRev := res[queue.MaxInflight].resp.Header.Revision
	sameQueue := map[int64]int{} // revisions of the two enqueues of one queue
	for i, r := range res {
		if !r.resp.Succeeded {
			t.Fatalf("enqueue %d refused", i)
		}
		own := r.resp.Responses[1].GetResponseRange().Kvs // newest first
		if len(own) == 0 || own[0].CreateRevision != r.resp.Header.Revision {
			t.Fatalf("enqueue %d: its queue read %v at revision %d, want its own key created then", i, own, r.resp.Header.Revision)
		}
		switch {
		case i >= n-1:
			sameQueue[r.resp.Header.Revision]++
		case i >= queue.MaxInflight && r.resp.Header.Revision != groupRev:
			t.Errorf("enqueue %d of the group at revision %d, the group's first at %d", i, r.resp.Header.Revision, groupRev)
		}
	}
	if len(sameQueue) != 2 || sameQueue[groupRev] != 1 {
		t.Errorf("the two enqueues of one queue at revisions %v, want one in the group (%d) and one after", sameQueue, groupRev)
	}
}

// A group etcd refuses as a whole (here: two enqueues of one key, which no
// session sends, but it makes etcd refuse the request) is sent again one
// by one, so that each gets its own answer; an enqueue whose caller gave
// up while it was queued is not sent.
func TestBatcherRefusedGroupGoesOneByOne(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli, held, sent, open := gatedClient(t, queue.MaxInflight)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	b := queue.NewBatcher(cli, ctx, func(fn func()) bool { wg.Go(fn); return true })
	base := fmt.Sprintf("/batch-refused-%d/v1/mutex/", time.Now().UnixNano())
	var f queue.Fence
	var calls sync.WaitGroup
	res := make([]enqueued, queue.MaxInflight+3)
	enqueue := func(ctx context.Context, i int, prefix, key string) {
		calls.Go(func() {
			resp, _, err := queue.Enqueue(ctx, cli, b, &f, queue.FenceKey(prefix, g.ID), g.ID, key, "v", prefix, nil, nil)
			res[i] = enqueued{resp, err}
		})
	}
	for i := range queue.MaxInflight {
		p := fmt.Sprintf("%sdirect-%d/", base, i)
		enqueue(ctx, i, p, p+"k")
	}
	waitUntil(t, func() bool { return held() == queue.MaxInflight }, "the direct enqueues in flight")
	dup := base + "dup/k"
	i := queue.MaxInflight
	enqueue(ctx, i, base+"dup-a/", dup)
	enqueue(ctx, i+1, base+"dup-b/", dup)
	gone, cancel := context.WithCancel(ctx)
	enqueue(gone, i+2, base+"gone/", base+"gone/k")
	waitUntil(t, func() bool { return queue.Queued(b) == 3 }, "the three queued")
	cancel()
	open()
	calls.Wait()
	// Alone, then the group (refused), then each of the two on its own,
	// and the refused one's second attempt, which reads why.
	if got, want := sent(), queue.MaxInflight+4; got != want {
		t.Errorf("%d transactions sent, want %d", got, want)
	}
	a, c := res[i], res[i+1]
	if a.err != nil || c.err != nil {
		t.Fatalf("after the group's refusal: %v, %v; want each answered on its own", a.err, c.err)
	}
	if a.resp.Succeeded == c.resp.Succeeded {
		t.Errorf("both enqueues of one key answered Succeeded=%v: want the first put, the second refused", a.resp.Succeeded)
	}
	if res[i+2].err == nil {
		t.Error("an enqueue whose caller gave up while queued succeeded")
	}
	if r, err := cli.Get(ctx, base+"gone/k"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("the given-up enqueue's key: %v, %v; want it never sent", r, err)
	}
}

// stagedClient holds its first n transactions until release is called and
// the next one until its ctx ends: a group's request that never returns
// unless cut short. held counts the first n once they are held, and the
// next once it is.
func stagedClient(t *testing.T, n int) (cli *clientv3.Client, held func() int, release func()) {
	t.Helper()
	var mu sync.Mutex
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var calls, blocked int
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method != "/etcdserverpb.KV/Txn" {
					return invoker(ctx, method, req, reply, cc, opts...)
				}
				mu.Lock()
				calls++
				call := calls
				if call <= n+1 {
					blocked++
				}
				mu.Unlock()
				if call <= n {
					<-gate
					return invoker(ctx, method, req, reply, cc, opts...)
				}
				if call == n+1 {
					<-ctx.Done()
					return ctx.Err()
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, func() int { mu.Lock(); defer mu.Unlock(); return blocked }, release
}

// fillSlots sends maxInflight enqueues through b on cli and waits until
// they are all in flight.
func fillSlots(t *testing.T, ctx context.Context, cli *clientv3.Client, b *queue.Batcher, lease clientv3.LeaseID, held func() int, base string) *sync.WaitGroup {
	t.Helper()
	var f queue.Fence
	var wg sync.WaitGroup
	for i := range queue.MaxInflight {
		wg.Go(func() {
			p := fmt.Sprintf("%sdirect-%d/", base, i)
			_, _, _ = queue.Enqueue(ctx, cli, b, &f, queue.FenceKey(p, lease), lease, p+"k", "v", p, nil, nil)
		})
	}
	waitUntil(t, func() bool { return held() == queue.MaxInflight }, "the direct enqueues in flight")
	return &wg
}

// A queued enqueue whose caller gives up before a sender took it is
// never sent: it returns ErrNotSent with ctx's error, and is not unheard,
// so its cleanup raises no fence (a cold start of a shard group cancels
// thousands of acquisitions queued this way, and each fence raised was a
// write). Whatever the caller's cause, the error is ctx.Err's, never one
// that reads as a refusal. Given up once a sender took it, it returns as
// a call cut short does: ctx.Err, and unheard (its request may still
// apply it, and only the fence's cleanup makes that harmless).
func TestBatcherQueuedCallerGivingUp(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli, held, release := stagedClient(t, queue.MaxInflight)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	b := queue.NewBatcher(cli, ctx, func(fn func()) bool { wg.Go(fn); return true })
	base := fmt.Sprintf("/batch-gaveup-%d/v1/mutex/", time.Now().UnixNano())
	direct := fillSlots(t, ctx, cli, b, g.ID, held, base)
	type out struct {
		unheard bool
		err     error
	}
	enqueue := func(name string) (func(error), <-chan out) {
		cctx, cancel := context.WithCancelCause(ctx)
		got := make(chan out, 1)
		go func() {
			var f queue.Fence
			p := base + name + "/"
			_, unheard, err := queue.Enqueue(cctx, cli, b, &f, queue.FenceKey(p, g.ID), g.ID, p+"k", "v", p, nil, nil)
			got <- out{unheard, err}
		}()
		return cancel, got
	}

	cancel, got := enqueue("queued")
	waitUntil(t, func() bool { return queue.Queued(b) == 1 }, "the enqueue queued")
	cancel(rpctypes.ErrGRPCPermissionDenied)
	o := <-got
	if o.unheard || !errors.Is(o.err, queue.ErrNotSent) || !errors.Is(o.err, context.Canceled) || retry.Permanent(o.err) {
		t.Errorf("a queued enqueue given up before it was sent: unheard=%v err=%v; want not unheard, ErrNotSent and context.Canceled", o.unheard, o.err)
	}

	cancel, got = enqueue("taken")
	waitUntil(t, func() bool { return queue.Queued(b) == 2 }, "the second enqueue queued beside the first (never sent)")
	release() // the slots free: a sender takes both, and the second's request is held until its ctx ends
	waitUntil(t, func() bool { return held() == queue.MaxInflight+1 }, "a sender to send the second")
	direct.Wait()
	cancel(rpctypes.ErrGRPCPermissionDenied)
	o = <-got
	if !o.unheard || errors.Is(o.err, queue.ErrNotSent) || !errors.Is(o.err, context.Canceled) || retry.Permanent(o.err) {
		t.Errorf("an enqueue given up once a sender took it: unheard=%v err=%v; want unheard, context.Canceled", o.unheard, o.err)
	}
	if r, err := cli.Get(ctx, base+"queued/k"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("the enqueue given up while queued: its key %v, %v; want it never sent", r, err)
	}
}

// A sender goroutine's request ends with the session (stop), so that
// Close, which waits for it, never waits on etcd; and once the session is
// closing (Go refuses), what is queued is answered ErrNotSent, not sent,
// and not unheard.
func TestBatcherEndsWithTheSession(t *testing.T) {
	for _, how := range []string{"stop", "closing"} {
		t.Run(how, func(t *testing.T) {
			ctx := etcdtest.Context(t, 30*time.Second)
			cli, held, release := stagedClient(t, queue.MaxInflight)
			g, err := cli.Grant(ctx, 30)
			if err != nil {
				t.Fatal(err)
			}
			stop, end := context.WithCancel(ctx)
			defer end()
			var senders sync.WaitGroup
			b := queue.NewBatcher(cli, stop, func(fn func()) bool {
				if how == "closing" {
					return false
				}
				senders.Go(fn)
				return true
			})
			base := fmt.Sprintf("/batch-%s-%d/v1/mutex/", how, time.Now().UnixNano())
			direct := fillSlots(t, ctx, cli, b, g.ID, held, base)
			type out struct {
				unheard bool
				err     error
			}
			got := make(chan out, 1)
			p := base + "queued/"
			go func() {
				var f queue.Fence
				_, unheard, err := queue.Enqueue(context.Background(), cli, b, &f, queue.FenceKey(p, g.ID), g.ID, p+"k", "v", p, nil, nil)
				got <- out{unheard, err}
			}()
			waitUntil(t, func() bool { return queue.Queued(b) == 1 }, "the enqueue queued")
			release()
			direct.Wait()
			if how == "stop" {
				// Its request (a group of one, on a ctx without end) hangs
				// until the session ends.
				end()
				done := make(chan struct{})
				go func() { senders.Wait(); close(done) }()
				etcdtest.Within(t, done, 5*time.Second, "the sender's end after the session's")
				if o := <-got; o.err == nil {
					t.Errorf("an enqueue cut short by the session's end succeeded")
				}
				return
			}
			o := <-got
			if !errors.Is(o.err, queue.ErrNotSent) || o.unheard {
				t.Errorf("an enqueue queued as the session closed: unheard=%v err=%v; want ErrNotSent, not unheard", o.unheard, o.err)
			}
			if r, err := cli.Get(ctx, p+"k"); err != nil || len(r.Kvs) != 0 {
				t.Errorf("its key: %v, %v; want none", r, err)
			}
		})
	}
}

// Raises of one fence at once share a put: while the first is in flight,
// every other caller waits for the next, sent once that one returned: two
// transactions for 33 cleanups, each told nil, and the fence's version
// read by the last is 2. (A shard group's member drops hundreds of
// acquisitions in flight when the group changes; each raised the fence
// on its own, a write each: 88% of a cold start's writes.)
func TestFenceRaisesAtOnceSharePuts(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli, held, sent, open := gatedClient(t, 1)
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	fkey := queue.FenceKey(fmt.Sprintf("/fence-%d/v1/mutex/a/", time.Now().UnixNano()), g.ID)
	var f queue.Fence
	const n = 33
	errs := make(chan error, n)
	go func() { errs <- f.Raise(ctx, cli, g.ID, fkey) }()
	waitUntil(t, func() bool { return held() == 1 }, "the first raise in flight")
	for range n - 1 {
		go func() { errs <- f.Raise(ctx, cli, g.ID, fkey) }()
	}
	waitUntil(t, func() bool { return queue.Joined(&f, fkey) == n-1 }, "the others to wait for the next raise")
	open()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := sent(); got != 2 {
		t.Errorf("%d transactions for %d raises at once, want 2: the first, and one shared by the others", got, n)
	}
	if r, err := cli.Get(ctx, fkey); err != nil || len(r.Kvs) != 1 || r.Kvs[0].Version != 2 {
		t.Errorf("the fence key after the raises: %v, %v; want version 2", r, err)
	}
}

// A raise asked for just as the one in flight returned, before the
// callers waiting for the next looked again, sends that next one, theirs:
// it sent one of its own, which the waiters found in flight and took for
// theirs, then waited for their own, which nobody would send, as long as
// their ctx lived. (A shard member's cleanups of acquisitions it dropped
// wait there with the lease's ctx: each keeps its key reserved, and the
// member never takes that shard again.)
func TestFenceRaiseAskedAsTheNextWaitsSendsIt(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	gates := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	t.Cleanup(func() {
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	})
	cli, sent := txnClient(t, func(i int) <-chan struct{} {
		if g, ok := gates[i]; ok {
			return g
		}
		return nil
	})
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	fkey := queue.FenceKey(fmt.Sprintf("/fence-next-%d/v1/mutex/a/", time.Now().UnixNano()), g.ID)
	var f queue.Fence
	first, waiter, late := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	var once sync.Once
	queue.SetWoke(&f, func() {
		// The waiter saw the first raise return: a third caller asks now,
		// and its put is in flight when the waiter looks again.
		once.Do(func() {
			go func() { late <- f.Raise(ctx, cli, g.ID, fkey) }()
			for deadline := time.Now().Add(5 * time.Second); sent() < 2 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // the test fails below if it never goes
			}
		})
	})
	go func() { first <- f.Raise(ctx, cli, g.ID, fkey) }()
	waitUntil(t, func() bool { return sent() == 1 }, "the first raise in flight")
	go func() { waiter <- f.Raise(ctx, cli, g.ID, fkey) }()
	waitUntil(t, func() bool { return queue.Joined(&f, fkey) == 1 }, "the second caller to wait for the next raise")
	close(gates[1])
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return sent() == 2 }, "the next raise in flight")
	close(gates[2])
	for name, ch := range map[string]chan error{"the waiting caller": waiter, "the third caller": late} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s's raise: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s's raise never returned: it waits for a raise nobody sends", name)
		}
	}
	if got := sent(); got != 2 {
		t.Errorf("%d transactions for three raises, want 2: the first, and one for the two asked while it was in flight or as it returned", got)
	}
}
