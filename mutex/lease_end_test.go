package mutex_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// gate blocks a hook until opened; opened with the test at the latest.
func gate(t *testing.T) (wait func(), open func()) {
	ch := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return func() { <-ch }, open
}

// When a lease ends (its validity deadline passes, or its session is
// closed) and this process revokes it, every hold on it knows before the
// revoke lets the next holder in, however late the goroutine that runs the
// holds' end hooks is scheduled. The holder's own deletion news is slowed
// down by its proxy so that only the lease's end can tell it first.
func TestHoldersKnowBeforeTheirLeaseIsRevoked(t *testing.T) {
	for _, how := range []string{"validity", "close"} {
		t.Run(how, func(t *testing.T) {
			ctx := etcdtest.Context(t, 20*time.Second)
			pcli, proxy := proxied(t)
			hooks := &core.Hooks{}
			clock := newManualClock()
			sess, err := bsession.New(pcli, bsession.WithTTL(5*time.Second), config.Hooks(hooks), config.Clock(clock))
			if err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			t.Cleanup(func() { _ = sess.Close() })
			name := "lease-end-" + how
			a := newMutex(t, pcli, name, mutex.WithSession(sess))
			b := newMutex(t, client(t), name)
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
			waitFor(t, func() bool { w, _ := b.Waiters(ctx); return len(w) == 1 })
			wait, open := gate(t)
			hooks.EndingHolds = wait
			proxy.SetDelay(300 * time.Millisecond)
			want := mutex.ErrValidityExpired
			if how == "validity" {
				clock.Advance(time.Minute)
			} else {
				want = mutex.ErrReleased
				go func() { defer close(closed); _ = sess.Close() }()
				t.Cleanup(func() { <-closed })
			}
			var lb *mutex.Lock
			select {
			case lb = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter never acquired")
			}
			select {
			case <-la.Done():
			default:
				t.Fatal("the waiter acquired while the old holder's Context was live")
			}
			if cause := context.Cause(la.Context()); !errors.Is(cause, want) {
				t.Fatalf("cause = %v, want %v", cause, want)
			}
			open()
			proxy.SetDelay(0)
			if lb != nil {
				_ = lb.Unlock(ctx)
			}
		})
	}
}

// A Lock whose lease is lost between its confirming read and its return
// (here the first hold on that lease) returns with its Context already
// ended: it never hands out a live Context past the validity deadline.
func TestLockOnALeaseLostBeforeArmReturnsEnded(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	pcli, proxy := proxied(t)
	hooks := &core.Hooks{}
	clock := newManualClock()
	obs, logs := observer.New(zap.WarnLevel)
	m := newMutex(t, pcli, "lease-end-arm", mutex.WithTTL(5*time.Second), mutex.WithLogger(zap.New(obs)),
		config.Hooks(hooks), config.Clock(clock))
	wait, open := gate(t)
	t.Cleanup(proxy.Restore)
	hooks.BeforeArm = func(string) {
		proxy.Blackhole() // the revoke and any deletion news are held back
		hooks.EndingHolds = wait
		clock.Advance(time.Minute)
		waitFor(t, func() bool { return logs.FilterMessage("lease lost").Len() > 0 })
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Lock returned a live Context on a lease lost before it returned")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrValidityExpired) {
		t.Fatalf("cause = %v", cause)
	}
	open()
	proxy.Restore()
}
