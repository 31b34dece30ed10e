package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/semaphore"
)

func TestAtMostLimitHoldAndTheNextWaits(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	s := newSem(t, client(t), "limit-two", 2)
	other := newSem(t, client(t), "limit-two", 2)
	a, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx) // one Semaphore holds several permits
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() == b.Key() || b.Token() <= a.Token() {
		t.Fatalf("keys %s %s, tokens %d %d: want distinct keys, increasing tokens", a.Key(), b.Key(), a.Token(), b.Token())
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire with both permits taken = %v, want ErrNoPermit", err)
	}
	got := make(chan *semaphore.Permit, 1)
	go func() {
		p, err := other.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	etcdtest.WaitKeys(t, client(t), s.Prefix(), 3)
	select {
	case <-got:
		t.Fatal("a third permit was granted with a limit of 2")
	case <-time.After(200 * time.Millisecond):
	}
	holders, err := s.Holders(ctx)
	if err != nil || len(holders) != 2 || holders[0].Token != a.Token() || holders[1].Token != b.Token() {
		t.Fatalf("Holders = %+v, %v; want a and b", holders, err)
	}
	waiters, err := s.Waiters(ctx)
	if err != nil || len(waiters) != 1 {
		t.Fatalf("Waiters = %+v, %v; want one", waiters, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var c *semaphore.Permit
	select {
	case c = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the released permit")
	}
	if c.Token() <= b.Token() {
		t.Fatalf("token %d granted after %d: not increasing", c.Token(), b.Token())
	}
	if !errors.Is(context.Cause(a.Context()), semaphore.ErrReleased) {
		t.Fatalf("released permit's cause = %v", context.Cause(a.Context()))
	}
	for _, p := range []*semaphore.Permit{b, c} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLimitStoredAtFirstUseAndMismatchNamesBoth(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	three := newSem(t, client(t), "stored-limit", 3)
	p, err := three.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	resp, err := client(t).Get(ctx, three.LimitKey())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
		t.Fatalf("stored limit = %v, %v; want 3", resp, err)
	}
	five := newSem(t, client(t), "stored-limit", 5)
	_, err = five.Acquire(ctx)
	if !errors.Is(err, semaphore.ErrLimitMismatch) || !strings.Contains(err.Error(), `"3"`) || !strings.Contains(err.Error(), "given 5") {
		t.Fatalf("Acquire with another limit = %v, want ErrLimitMismatch naming 3 and 5", err)
	}
	if keys := etcdtest.Keys(t, client(t), five.Prefix()); len(keys) != 1 {
		t.Fatalf("keys after a refused Acquire: %v", keys)
	}
}

func TestNewValidatesLimitAndIdentity(t *testing.T) {
	cli := client(t)
	for _, tc := range []struct {
		limit int
		opts  []semaphore.Option
		want  string
	}{
		{0, nil, "limit is 0, must be 1 to 10000"},
		{10001, nil, "limit is 10001"},
		{1, []semaphore.Option{semaphore.WithIdentity("")}, "WithIdentity must not be empty"},
		{1, []semaphore.Option{semaphore.WithIdentity("a\nb")}, "control character"},
		{1, []semaphore.Option{semaphore.WithTTL(time.Second)}, "WithTTL(1s)"},
	} {
		_, err := semaphore.New(cli, "valid", tc.limit, tc.opts...)
		if !errors.Is(err, semaphore.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(limit %d) = %v, want ErrInvalid naming %q", tc.limit, err, tc.want)
		}
	}
}

func TestIdentityIsStoredAndShown(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	s := newSem(t, client(t), "identity", 1, semaphore.WithIdentity("worker-7"))
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Holders(ctx)
	if err != nil || len(h) != 1 || h[0].Identity != "worker-7" || h[0].Token != fencing.Token(p.Token()) {
		t.Fatalf("Holders = %+v, %v", h, err)
	}
	_ = p.Release(ctx)
}

func TestTxnAppliesOnlyWhilePermitHeld(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	s := newSem(t, client(t), "txn", 2)
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Txn(ctx).Then(clientv3OpPut("/test/txn-sem", "1")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := client(t).Delete(ctx, p.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, p.Done(), 5*time.Second, "end after the key's deletion")
	if _, err := p.Txn(ctx).Then(clientv3OpPut("/test/txn-sem", "2")).Commit(); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Fatalf("Txn after loss = %v, want ErrNotHeld", err)
	}
	if err := p.Release(ctx); !errors.Is(err, semaphore.ErrNotHeld) || !errors.Is(err, semaphore.ErrKeyDeleted) {
		t.Fatalf("Release after deletion = %v, want ErrNotHeld and ErrKeyDeleted", err)
	}
}

func TestCloseEndsWaitersAndPermits(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	holder := newSem(t, client(t), "close", 1)
	s, err := semaphore.New(client(t), "close", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx); errc <- err }()
	etcdtest.WaitKeys(t, client(t), s.Prefix(), 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, semaphore.ErrClosed) {
		t.Fatalf("waiting Acquire after Close = %v, want ErrClosed", err)
	}
	etcdtest.WaitKeys(t, client(t), s.Prefix(), 1)
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(p.Context()), semaphore.ErrReleased) {
		t.Fatalf("cause after Close = %v", context.Cause(p.Context()))
	}
	etcdtest.WaitKeys(t, client(t), s.Prefix(), 0)
}
