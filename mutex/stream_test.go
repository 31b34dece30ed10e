package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/watch"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// eventClient counts the watch events it receives, by type.
func eventClient(t *testing.T, puts, deletes *atomic.Int64) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Watch/Watch" {
					return cs, err
				}
				return &eventStream{ClientStream: cs, puts: puts, deletes: deletes}, nil
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

type eventStream struct {
	grpc.ClientStream
	puts, deletes *atomic.Int64
}

func (s *eventStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*etcdserverpb.WatchResponse); ok && err == nil {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT {
				s.puts.Add(1)
			} else {
				s.deletes.Add(1)
			}
		}
	}
	return err
}

// watchers is the number of watchers the member serves.
func watchers(t *testing.T) float64 {
	t.Helper()
	return srv.Metric(t, "etcd_debugging_mvcc_watcher_total")
}

// A session that holds a lock receives nothing of another session's
// acquisitions and releases in the namespace: its watches are of its own
// keys (issue 47: with one deletion watch of the namespace per session
// holding there, every release reached every such session, 99.7 events
// per acquisition with 50 processes), and a deletion of its key still
// ends its hold.
func TestAnotherSessionsLocksReachNoOtherSession(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	var puts, deletes atomic.Int64
	wcli := eventClient(t, &puts, &deletes)
	ws, err := bsession.New(wcli, bsession.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	mine, err := newMutex(t, wcli, "quiet-mine", mutex.WithSession(ws)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	other := client(t)
	osess, err := bsession.New(other, bsession.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = osess.Close() })
	const n = 50
	for i := range n {
		l, err := newMutex(t, other, fmt.Sprintf("quiet-%d", i), mutex.WithSession(osess)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		contendedUnlock(t, ctx, other, l) // a release that marks, as a handoff's does
	}
	// Its own key's deletion is delivered to it: everything before it has
	// been, on one stream.
	if _, err := other.Delete(ctx, mine.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, mine.Done(), 5*time.Second, "the hold's end after its key's deletion")
	if p, d := puts.Load(), deletes.Load(); p != 0 || d != 1 {
		t.Errorf("a session holding one lock received %d puts and %d deletions while another took and released %d locks, then its key was deleted; want 0 and 1", p, d, n)
	}
}

// A handoff costs the cluster the same few watch events however many
// sessions hold locks in the namespace: the deletion goes to the waiter
// behind the key and to the holder's own watch, not to every session.
// With twenty other sessions holding, the member sends at most three.
func TestAHandoffCostsTheSameEventsHoweverManySessionsHold(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	cli := client(t)
	base := watchers(t)
	for i := range 20 {
		s, err := bsession.New(cli, bsession.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		l, err := newMutex(t, cli, fmt.Sprintf("fleet-%d", i), mutex.WithSession(s)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	}
	waiting := make(chan struct{}, 1)
	wsess, err := bsession.New(cli, bsession.WithTTL(5*time.Second), config.Hooks(&core.Hooks{
		Stream: watch.Hooks{Followed: func(bool) { waiting <- struct{}{} }}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wsess.Close() })
	holder, err := newMutex(t, cli, "fleet-x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, lb := lockWhenWaiting(t, ctx, newMutex(t, cli, "fleet-x", mutex.WithSession(wsess)), waiting)
	waitFor(t, func() bool { return watchers(t) >= base+22 }) // at least the 20 sessions', the holder's and the waiter's
	before := srv.Metric(t, "etcd_debugging_mvcc_events_total")
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second) // the member has sent whatever it sends by then
	for time.Now().Before(deadline) {
		if n := srv.Metric(t, "etcd_debugging_mvcc_events_total") - before; n > 3 {
			t.Fatalf("the member sent %v watch events for one handoff with 20 other sessions holding in the namespace, want at most 3", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = (*lb).Unlock(ctx)
}

// Waiters watch on their session's stream: no goroutine and no gRPC
// stream of their own (etcd's clientv3.Watch makes a goroutine per watch).
func TestWaitersCostNoGoroutineOfTheirOwn(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	const n = 40
	var holders []*mutex.Lock
	for i := range n {
		l, err := newMutex(t, cli, fmt.Sprintf("gor-%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}
	var waits atomic.Int64
	sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second), config.Hooks(&core.Hooks{Stream: watch.Hooks{Followed: func(bool) { waits.Add(1) }}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	streams := srv.Metric(t, "etcd_debugging_mvcc_watch_stream_total")
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for i := range n {
		m := newMutex(t, cli, fmt.Sprintf("gor-%d", i), mutex.WithSession(sess))
		wg.Go(func() {
			l, err := m.Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool { return waits.Load() == n })
	// The n callers' goroutines, the session's (its watchdog, its stream),
	// and a few of gRPC's; none per waiter.
	if grown := runtime.NumGoroutine() - before; grown > n+8 {
		t.Errorf("%d goroutines more while %d waiters wait, want at most %d: a goroutine per waiter", grown, n, n+8)
	}
	if s := srv.Metric(t, "etcd_debugging_mvcc_watch_stream_total") - streams; s > 1 {
		t.Errorf("%v watch streams more while %d waiters of one session wait, want 1", s, n)
	}
	for _, l := range holders {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// The holder's key is deleted after the waiter's enqueue read it and before
// the waiter's watch of it began: the waiter reads it (the watch alone
// would never tell it) and holds.
func TestAKeyAheadGoneBeforeTheWatchBeganIsRead(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	hooks := &core.Hooks{}
	sess, err := bsession.New(cli, config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	holder, err := newMutex(t, client(t), "gone-before").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hooks.BeforeWait = func(string) {
		if err := holder.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := newMutex(t, cli, "gone-before", mutex.WithSession(sess)).Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after the holder's key went before the wait: %v", err)
	}
	_ = l.Unlock(ctx)
}

// The waiter's own key is deleted while it waits: Lock returns the loss
// at once, not when the holder goes.
func TestAWaiterWhoseKeyIsDeletedLoses(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	own := make(chan string, 1)
	sess, err := bsession.New(cli, config.Hooks(&core.Hooks{BeforeWait: func(key string) { own <- key }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	holder, err := newMutex(t, client(t), "own-deleted").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := newMutex(t, cli, "own-deleted", mutex.WithSession(sess)).Lock(ctx)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	key := <-own
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, mutex.ErrLost) {
			t.Fatalf("Lock whose key %s was deleted = %v, want ErrLost", key, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter whose key was deleted never returned")
	}
}
