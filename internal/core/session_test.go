package core

import (
	"context"
	"errors"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/etcdtest"
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
		if err := etcdtest.Leaked(); err != nil {
			fmt.Fprintln(os.Stderr, err)
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

func grantForTest(t *testing.T, cfg Config, cli *clientv3.Client) (*Session, *Lease) {
	t.Helper()
	s := NewSession(cli, cfg)
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.Lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

func TestValidityDeadlineIsSendTimePlusTTLMinusMargin(t *testing.T) {
	cli := srv.Client(t)
	clock := newManualClock()
	renewed := make(chan struct{}, 4)
	start := clock.Now()
	_, l := grantForTest(t, Config{
		TTL: 6 * time.Second, Margin: time.Second, Clock: clock,
		Hooks: &Hooks{OnRenewed: func() { renewed <- struct{}{} }},
	}, cli)
	if l.TTL() != 6*time.Second {
		t.Fatalf("granted TTL %v", l.TTL())
	}
	if got, want := l.Deadline(), start.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("deadline after grant = %v, want grant send time + 6s − 1s = %v", got, want)
	}
	clock.BlockUntil(t, 2)         // the validity timer and the watchdog's sleep
	clock.Advance(2 * time.Second) // TTL/3: the first renewal goes out
	sent := clock.Now()
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	// The clock moves on while the reply travels; the deadline still counts
	// from the send time.
	clock.Advance(500 * time.Millisecond)
	if got, want := l.Deadline(), sent.Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("deadline after renewal = %v, want renewal send time + 5s = %v", got, want)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lost: %v", context.Cause(l.Context()))
	}
}

func TestValidityExpiresOnTheClockWhileRenewalsHang(t *testing.T) {
	pcli, proxy := srv.Proxied(t)
	clock := newManualClock()
	_, l := grantForTest(t, Config{TTL: 30 * time.Second, Margin: 10 * time.Second, Clock: clock}, pcli)
	proxy.Blackhole()
	defer proxy.Restore()
	clock.BlockUntil(t, 2)
	clock.Advance(19 * time.Second)
	select {
	case <-l.Context().Done():
		t.Fatalf("lost before the deadline: %v", context.Cause(l.Context()))
	default:
	}
	clock.Advance(time.Second) // 30s − 10s after the grant was sent
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("validity deadline passed on the clock, but the lease lives")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, errs.ErrLost) || !errors.Is(cause, errs.ErrValidityExpired) {
		t.Fatalf("cause = %v", cause)
	}
}

// A caller waiting for a grant that etcd does not answer returns when its
// own ctx ends, while the grant goes on for the others.
func TestGrantWaitIsBoundedByEachCallersCtx(t *testing.T) {
	pcli, proxy := srv.Proxied(t)
	proxy.Blackhole()
	defer proxy.Restore()
	s := NewSession(pcli, Config{TTL: 5 * time.Second})
	defer s.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		_, err := s.Lease(ctx)
		cancel()
		if err == nil {
			t.Fatal("lease granted with etcd unreachable")
		}
		if d := time.Since(start); d > 300*time.Millisecond {
			t.Fatalf("lease wait took %v with a 200ms ctx", d)
		}
	}
}

// Close revokes the lease and waits for the session's goroutines; a second
// Close is a no-op.
func TestCloseRevokesAndIsIdempotent(t *testing.T) {
	cli := srv.Client(t)
	s := NewSession(cli, Config{TTL: 5 * time.Second})
	l, err := s.Lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, errs.ErrReleased) {
		t.Fatalf("lease cause after Close = %v", cause)
	}
	resp, err := cli.TimeToLive(context.Background(), l.ID())
	if err != nil || resp.TTL > 0 {
		t.Fatalf("lease after Close: %v %v", resp, err)
	}
	if _, err := s.Lease(context.Background()); !errors.Is(err, errs.ErrClosed) {
		t.Fatalf("lease after Close = %v", err)
	}
}
