package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/semaphore"
)

// TestLockDelayHoldsBackPermitsAfterALostHolderOnly: with a limit of 2,
// one holder's key force-deleted keeps a new permit back for the delay
// although a permit is free; a clean Release does not.
func TestLockDelayHoldsBackPermitsAfterALostHolderOnly(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	const d = 2 * time.Second
	opt := []semaphore.Option{semaphore.WithLockDelay(d), semaphore.WithNamespace("semdelay")}
	s := newSem(t, cli, "pool", 2, opt...)
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p3, err := newSem(t, client(t), "pool", 2, opt...).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a permit after a clean Release took %v", took)
	}
	if err := p3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, p1.Key()); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	p4, err := newSem(t, client(t), "pool", 2, opt...).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(lost); took < d {
		t.Fatalf("a permit %v after a holder was force-deleted; want at least %v", took, d)
	}
	_ = p4.Release(context.Background())
}
