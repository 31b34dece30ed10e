package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/lease"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	s, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// manualClock moves only when told to.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
	added  chan struct{} // a token per AfterFunc, for BlockUntil
}

type manualTimer struct {
	c       *manualClock
	when    time.Time
	f       func()
	stopped bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(1_700_000_000, 0), added: make(chan struct{}, 1)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	select {
	case c.added <- struct{}{}:
	default:
	}
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// BlockUntil waits until n timers are pending, so that an Advance reaches
// the timer a goroutine is about to set.
func (c *manualClock) BlockUntil(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		pending := 0
		for _, tm := range c.timers {
			if !tm.stopped {
				pending++
			}
		}
		c.mu.Unlock()
		if pending >= n {
			return
		}
		select {
		case <-c.added:
		case <-timeout:
			t.Fatalf("never %d pending timers (%d)", n, pending)
		}
	}
}

// Advance moves the clock and runs what fell due, as time.AfterFunc does.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.when.After(c.now):
			t.stopped = true
			due = append(due, t.f)
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

func TestValidityDeadlineIsSendTimePlusTTLMinusMargin(t *testing.T) {
	cli := srv.Client(t)
	clock := newManualClock()
	renewed := make(chan time.Time, 4)
	start := clock.Now()
	s, err := lease.Grant(context.Background(), cli, lease.Config{
		TTL: 6 * time.Second, Margin: time.Second, Clock: clock,
		OnRenewed: func(sent time.Time) { renewed <- sent },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.TTL() != 6*time.Second {
		t.Fatalf("granted TTL %v", s.TTL())
	}
	if got, want := s.Deadline(), start.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("deadline after grant = %v, want grant send time + 6s − 1s = %v", got, want)
	}
	clock.BlockUntil(t, 2)         // the validity timer and the renewal loop's
	clock.Advance(2 * time.Second) // TTL/3: the first renewal goes out
	var sent time.Time
	select {
	case sent = <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	// The clock moves on while the reply travels; the deadline still counts
	// from the send time.
	clock.Advance(500 * time.Millisecond)
	if got, want := s.Deadline(), sent.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("deadline after renewal = %v, want renewal send time + 5s = %v", got, want)
	}
	if s.Lost() {
		t.Fatalf("lost: %v", context.Cause(s.Context()))
	}
}

func TestValidityExpiresOnTheClockWhileRenewalsHang(t *testing.T) {
	pcli, proxy := srv.Proxied(t)
	clock := newManualClock()
	s, err := lease.Grant(context.Background(), pcli, lease.Config{TTL: 30 * time.Second, Margin: 10 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	proxy.Blackhole()
	clock.BlockUntil(t, 2)
	clock.Advance(19 * time.Second)
	select {
	case <-s.Context().Done():
		t.Fatalf("lost before the deadline: %v", context.Cause(s.Context()))
	default:
	}
	clock.Advance(time.Second) // 30s − 10s after the grant was sent
	select {
	case <-s.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("validity deadline passed on the clock, but the session lives")
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, errs.ErrLost) || !errors.Is(cause, errs.ErrValidityExpired) {
		t.Fatalf("cause = %v", cause)
	}
	proxy.Restore()
}

func TestBorrowedSessionsShareOneWatchdog(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	a, err := lease.Borrow(context.Background(), cs, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.Borrow(context.Background(), cs, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("two watchdogs for one borrowed session")
	}
	if _, err := lease.Borrow(context.Background(), cs, lease.Config{MaxTTL: 5 * time.Second}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("borrow with a cap below the session's TTL = %v", err)
	}
	_ = a.Close()
	if b.Lost() {
		t.Fatal("closing one user ended the shared watchdog")
	}
	_ = b.Close()
	if !b.Lost() {
		t.Fatal("last Close left the watchdog running")
	}
	select {
	case <-cs.Done():
		t.Fatal("closing the watchdog closed the borrowed session")
	default:
	}
}

func TestGrantIsBoundedWhenEtcdIsUnreachable(t *testing.T) {
	pcli, proxy := srv.Proxied(t)
	proxy.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lease.Grant(ctx, pcli, lease.Config{TTL: 5 * time.Second})
	if err == nil {
		t.Fatal("Grant succeeded with etcd unreachable")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Grant took %v with a 200ms ctx", d)
	}
	proxy.Restore()
}
