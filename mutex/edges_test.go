package mutex_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/watch"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// A key deleted between the acquisition's confirming read and the hold's
// registration, while the session's watch stream runs (it holds another
// lock) and has delivered that deletion to the key's own watch (made
// before its enqueue), must still end the new hold.
func TestKeyDeletedBetweenConfirmAndRegistrationIsNoticed(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	deleted := make(chan string, 16)
	var target string
	hooks := &core.Hooks{
		Stream: watch.Hooks{Deleted: func(key string) { deleted <- key }},
		AfterConfirm: func(key string) {
			if key != target {
				return
			}
			if _, err := cli.Delete(context.Background(), key); err != nil {
				t.Error(err)
			}
			// The watch has received the deletion before the hold exists.
			for {
				select {
				case k := <-deleted:
					if k == key {
						return
					}
				case <-time.After(5 * time.Second):
					t.Error("the session's watch stream never received the deletion")
					return
				}
			}
		},
	}
	sess, err := bsession.New(cli, config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	other := newMutex(t, cli, "edge-confirm-other", mutex.WithSession(sess))
	held, err := other.Lock(ctx) // starts the session's watch stream
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	m := newMutex(t, cli, "edge-confirm", mutex.WithSession(sess))
	target = m.Prefix()
	hooks.AfterConfirm = wrapPrefix(hooks.AfterConfirm, &target)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, l.Done(), 2*time.Second, "the hold's end after its key was deleted before registration")
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrLost) {
		t.Fatalf("cause = %v", cause)
	}
}

// wrapPrefix turns a hook matching one key into one matching any key under
// the prefix *p (the key's lease is not known before the lock).
func wrapPrefix(f func(string), p *string) func(string) {
	prefix := *p
	return func(key string) {
		if strings.HasPrefix(key, prefix) {
			*p = key
		}
		f(key)
	}
}

// A Lock or TryLock returns within ~100 ms of its ctx ending even while
// another caller of the same session waits for a lease grant that etcd
// does not answer.
func TestLockHonoursCtxWhileAnotherCallerGrants(t *testing.T) {
	pcli, proxy := proxied(t)
	proxy.Blackhole()
	defer proxy.Restore()
	m := newMutex(t, pcli, "edge-grant", mutex.WithTTL(5*time.Second))
	first := make(chan error, 1)
	go func() {
		_, err := m.Lock(etcdtest.Context(t, 8*time.Second))
		first <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the first call start the grant
	for _, try := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		var err error
		if try {
			_, err = m.TryLock(ctx)
		} else {
			_, err = m.Lock(ctx)
		}
		cancel()
		if err == nil {
			t.Fatal("acquired with etcd unreachable")
		}
		if d := time.Since(start); d > 400*time.Millisecond {
			t.Fatalf("try=%v returned after %v with a 300ms ctx while another caller granted", try, d)
		}
	}
	proxy.Restore()
	if err := <-first; err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("first caller: %v", err)
	}
}

// Session-wide settings are set once, on the session: a Mutex given a
// conflicting one is refused with both values named; an equal one is fine.
func TestConflictingSessionSettingsAreRefused(t *testing.T) {
	cli := client(t)
	sess, err := bsession.New(cli, bsession.WithTTL(10*time.Second), bsession.WithSafetyMargin(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	tests := []struct {
		name string
		opt  mutex.Option
		want []string // in the error; none: accepted
	}{
		{"other margin", mutex.WithSafetyMargin(3 * time.Second), []string{"WithSafetyMargin", "3s", "2s"}},
		{"same margin", mutex.WithSafetyMargin(2 * time.Second), nil},
		{"other ttl", mutex.WithTTL(20 * time.Second), []string{"WithTTL", "20s", "10s"}},
		{"other logger", mutex.WithLogger(nil), []string{"WithLogger"}},
		{"not session-wide", mutex.WithNamespace("edge"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mutex.New(cli, "edge-conflict", mutex.WithSession(sess), tt.opt)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				_ = m.Close()
				return
			}
			if !errors.Is(err, mutex.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
	if _, err := bsession.New(cli, mutex.WithNamespace("x")); !errors.Is(err, mutex.ErrInvalid) {
		t.Fatalf("session.New with a mutex-only option = %v", err)
	}
}

// After an admin's revoke or delete, the old holder's Done is closed before
// a waiter woken by the same event returns from Lock, every time, with the
// same network delay (1 ms each way) between etcd and both clients.
func TestHolderKnowsBeforeTheNextWaiterAcquires(t *testing.T) {
	const trials = 20
	admin := client(t)
	delayed := func() *clientv3.Client {
		cli, p := proxied(t)
		p.SetDelay(time.Millisecond)
		return cli
	}
	// following: the waiter's session holds another lock, so its watch
	// stream runs before the waiter queues.
	for _, how := range []string{"revoke", "delete", "revoke-following", "delete-following"} {
		t.Run(how, func(t *testing.T) {
			holder, waiter := delayed(), delayed()
			var wopts []mutex.Option
			if strings.HasSuffix(how, "-following") {
				sess, err := bsession.New(waiter, bsession.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sess.Close() })
				l, err := newMutex(t, waiter, "edge-first-other-"+how, mutex.WithSession(sess)).Lock(etcdtest.Context(t, 10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Unlock(context.Background()) })
				wopts = append(wopts, mutex.WithSession(sess))
			} else {
				wopts = append(wopts, mutex.WithTTL(5*time.Second))
			}
			for i := range trials {
				ctx := etcdtest.Context(t, 20*time.Second)
				a := newMutex(t, holder, "edge-first-"+how, mutex.WithTTL(5*time.Second))
				b := newMutex(t, waiter, "edge-first-"+how, wopts...)
				la, err := a.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *mutex.Lock, 1)
				go func() {
					lb, err := b.Lock(ctx)
					if err != nil {
						t.Error(err)
					}
					got <- lb
				}()
				waitFor(t, func() bool { w, _ := a.Waiters(ctx); return len(w) == 1 })
				if strings.HasPrefix(how, "revoke") {
					_, err = admin.Revoke(ctx, la.Lease())
				} else {
					_, err = admin.Delete(ctx, la.Key())
				}
				if err != nil {
					t.Fatal(err)
				}
				lb := <-got
				select {
				case <-la.Done():
				default:
					t.Fatalf("trial %d: the waiter acquired while the old holder's Context was live", i)
				}
				_ = lb.Unlock(ctx)
				_ = a.Close()
				_ = b.Close()
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A waiting Lock returns ErrClosed, not the session's release, when its
// Mutex is closed.
func TestWaitingLockReturnsErrClosedOnClose(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	holder := newMutex(t, cli, "edge-closed")
	l, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for i := range 8 {
		m, err := mutex.New(cli, "edge-closed", mutex.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { _, err := m.Lock(ctx); res <- err }()
		waitFor(t, func() bool { w, _ := holder.Waiters(ctx); return len(w) == 1 })
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, mutex.ErrClosed) {
			t.Fatalf("trial %d: waiting Lock after Close = %v, want ErrClosed", i, err)
		}
	}
}

// After Close returns, no goroutine of the Mutex runs, also when a Lock was
// in flight as Close began.
func TestCloseIsFinal(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	// The holder is etcd's own Mutex: no goroutine of baton's but the
	// closed Mutex's may run.
	holder := concurrency.NewMutex(session(t, cli, 10), "/baton/v1/lock/edge-final/")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)
	if g := batonGoroutines(); len(g) > 0 {
		t.Fatalf("goroutines of baton before the test:\n%s", strings.Join(g, "\n\n"))
	}
	probe := newMutex(t, cli, "edge-final")
	inClose := make(chan struct{})
	m, err := mutex.New(cli, "edge-final", config.Hooks(&core.Hooks{InClose: func() { close(inClose) }}))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { _, err := m.Lock(ctx); res <- err }()
	waitFor(t, func() bool { w, _ := probe.Waiters(ctx); return len(w) == 1 })
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	<-inClose
	if err := <-res; !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("Lock in flight during Close = %v", err)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("Lock after Close = %v", err)
	}
	if g := batonGoroutines(); len(g) > 0 {
		t.Fatalf("goroutines of baton after Close:\n%s", strings.Join(g, "\n\n"))
	}
}

// A hold lost by its watchdog on a borrowed lease keeps its key reserved
// until the key is deleted, so the next Lock never adopts it: it gets a
// new key and a higher token.
func TestLockAfterWatchdogLossNeverAdoptsTheOldKey(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	cs := session(t, cli, 10)
	clock := newManualClock()
	m := newMutex(t, cli, "edge-adopt", mutex.WithSession(cs), config.Clock(clock))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // the validity deadline passes
	etcdtest.Within(t, l.Done(), 5*time.Second, "loss on the watchdog's clock")
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrValidityExpired) {
		t.Fatalf("cause = %v", cause)
	}
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if l2.Token() == l.Token() {
		t.Fatalf("the new lock adopted the lost one's key (token %d)", l.Token())
	}
	if err := l.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("Unlock of the lost lock = %v", err)
	}
	resp, err := cli.Get(ctx, l2.Key())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(l2.Token()) {
		t.Fatalf("the stale handle's Unlock touched the new holder's key: %v %v", resp, err)
	}
	_ = clientv3.NoLease
}

// batonGoroutines returns the stacks of goroutines running baton's core
// (the etcd client's and server's own goroutines are not baton's).
func batonGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "batonhq/baton/internal/core.") {
			out = append(out, g)
		}
	}
	return out
}
