package rwmutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

// Close of an RWMutex holding several read locks returns within one bound
// while etcd is unreachable, not one bound per lock.
func TestCloseWithReadLocksIsBoundedWhileEtcdIsUnreachable(t *testing.T) {
	pcli, proxy := proxied(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	rw := newRW(t, pcli, "close-readers")
	for range 3 {
		if _, err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Blackhole()
	defer proxy.Restore()
	start := time.Now()
	_ = rw.Close()
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Close with 3 read locks took %v with etcd unreachable", d)
	}
}

// The documented rule: a read lock taken again by a reader waits behind a
// writer queued since, as with sync.RWMutex.
func TestNestedRLockWaitsBehindAQueuedWriter(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	rw := newRW(t, cli, "nested-rlock")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _, _ = rw.Lock(wctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w, err := rw.Waiters(ctx)
		if err == nil && len(w) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	nctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = rw.RLock(nctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested RLock behind a queued writer = %v, want it to wait (DeadlineExceeded)", err)
	}
	wcancel()
	_ = r1.Unlock(ctx)
}
