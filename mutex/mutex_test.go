package mutex_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func newMutex(t *testing.T, cli *clientv3.Client, name string, opts ...mutex.Option) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(cli, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestTokenIsCreateRevisionAndIncreases(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	a := newMutex(t, cli, "tokens")
	b := newMutex(t, client(t), "tokens")
	var last fencing.Token
	for i := range 6 {
		m := a
		if i%2 == 1 {
			m = b
		}
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, l.Key())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get holder key: %v %v", resp, err)
		}
		if got := fencing.Token(resp.Kvs[0].CreateRevision); got != l.Token() {
			t.Fatalf("Token() = %d, key's CreateRevision = %d", l.Token(), got)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d: not strictly increasing", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTxnAppliesOnlyWhileHeld(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	if _, err := cli.Delete(ctx, "/data/txn", clientv3.WithPrefix()); err != nil { // repeatable with -count
		t.Fatal(err)
	}
	m := newMutex(t, cli, "txn")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := l.Txn(ctx).If(clientv3.Compare(clientv3.Version("/data/txn"), "=", 0)).
		Then(clientv3.OpPut("/data/txn", "1")).Else(clientv3.OpPut("/data/txn-else", "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded txn while held: %v, %v", resp, err)
	}
	// The caller's own comparison failing runs the caller's Else.
	resp, err = l.Txn(ctx).If(clientv3.Compare(clientv3.Version("/data/txn"), "=", 0)).
		Then(clientv3.OpPut("/data/txn", "2")).Else(clientv3.OpGet("/data/txn")).Commit()
	if err != nil || resp.Succeeded || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "1" {
		t.Fatalf("guarded txn else branch: %v, %v", resp, err)
	}
	// Someone deletes the holder's key: the next fenced write applies nothing.
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	_, err = l.Txn(ctx).Then(clientv3.OpPut("/data/txn", "stale")).Else(clientv3.OpPut("/data/txn-else", "stale")).Commit()
	if !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("txn after key deletion: %v, want ErrNotHeld", err)
	}
	etcdtest.Within(t, l.Done(), 5*time.Second, "context end after key deletion")
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrLost) || !errors.Is(cause, mutex.ErrKeyGone) {
		t.Fatalf("cause = %v, want ErrLost and ErrKeyGone", cause)
	}
	if err := l.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) || !errors.Is(err, mutex.ErrKeyDeleted) {
		t.Fatalf("Unlock after the key's deletion = %v, want ErrNotHeld and ErrKeyDeleted", err)
	}
	got, _ := cli.Get(ctx, "/data/txn")
	if string(got.Kvs[0].Value) != "1" {
		t.Fatalf("value = %q after stale write, want 1", got.Kvs[0].Value)
	}
	if n := len(etcdtest.Keys(t, cli, "/data/txn-else")); n != 0 {
		t.Fatalf("else branch ran for a stale holder")
	}
}

func TestTryLockReturnsErrLockedAndLeavesNoKey(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	a := newMutex(t, cli, "try")
	b := newMutex(t, client(t), "try")
	l, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, mutex.ErrLocked) {
		t.Fatalf("TryLock on held lock = %v, want ErrLocked", err)
	}
	if got := etcdtest.Keys(t, cli, a.Prefix()); len(got) != 1 || got[0] != l.Key() {
		t.Fatalf("keys after failed TryLock = %v, want only the holder's", got)
	}
	// Another goroutine on the same Mutex is excluded too.
	if _, err := a.TryLock(ctx); !errors.Is(err, mutex.ErrLocked) {
		t.Fatalf("TryLock from the holder's own Mutex = %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after unlock: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func TestGoroutinesSharingASessionExclude(t *testing.T) {
	cli := client(t)
	sess := session(t, cli, 10)
	// Two Mutex values on one session, and two goroutines on each.
	m1 := newMutex(t, cli, "shared-session", mutex.WithSession(sess))
	m2 := newMutex(t, cli, "shared-session", mutex.WithSession(sess))
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	ctx := etcdtest.Context(t, 60*time.Second)
	for g := range 4 {
		m := m1
		if g%2 == 1 {
			m = m2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				total.Add(1)
				time.Sleep(time.Millisecond) // widen the window an overlap would need
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d of %d acquisitions overlapped another holder on the same session", overlaps.Load(), total.Load())
	}
	if total.Load() != 40 {
		t.Fatalf("%d acquisitions, want 40", total.Load())
	}
}

func TestWaitersAcquireInOrder(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	holder := newMutex(t, cli, "fifo")
	first, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		m := newMutex(t, client(t), "fifo")
		// Queue one at a time so the arrival order is known.
		queued := len(etcdtest.Keys(t, cli, holder.Prefix()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = l.Unlock(ctx)
		}()
		waitKeys(t, cli, holder.Prefix(), queued+1)
	}
	w, err := holder.Waiters(ctx)
	if err != nil || len(w) != n {
		t.Fatalf("Waiters = %v, %v; want %d", w, err, n)
	}
	for i := 1; i < len(w); i++ {
		if w[i].Token <= w[i-1].Token {
			t.Fatalf("waiters not in token order: %v", w)
		}
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d acquired in position %d", got, want)
		}
		want++
	}
}

func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	etcdtest.WaitKeys(t, cli, prefix, n)
}

func TestUnlockNeverDeletesANewerHoldersKey(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	m := newMutex(t, cli, "stale-unlock")
	first, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The same session re-acquires: same key name, new CreateRevision.
	second, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Key() != first.Key() || second.Token() <= first.Token() {
		t.Fatalf("re-acquired key %s token %d after %s token %d", second.Key(), second.Token(), first.Key(), first.Token())
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock of a released lock = %v, want nil", err)
	}
	if got := etcdtest.Keys(t, cli, m.Prefix()); len(got) != 1 {
		t.Fatalf("a stale Unlock deleted the newer holder's key: keys = %v", got)
	}
	select {
	case <-second.Done():
		t.Fatalf("newer holder lost its lock: %v", context.Cause(second.Context()))
	default:
	}

	// A handle lost to key deletion, while another client holds the lock.
	if _, err := cli.Delete(ctx, second.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, second.Done(), 5*time.Second, "loss after deletion")
	other := newMutex(t, client(t), "stale-unlock")
	third, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) || !errors.Is(err, mutex.ErrKeyDeleted) {
		t.Fatalf("Unlock after loss = %v, want ErrNotHeld wrapping ErrKeyDeleted", err)
	}
	if err := second.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("repeated Unlock after loss = %v, want ErrNotHeld again", err)
	}
	if got := etcdtest.Keys(t, cli, m.Prefix()); len(got) != 1 || got[0] != third.Key() {
		t.Fatalf("keys = %v, want only %s", got, third.Key())
	}
	_ = third.Unlock(ctx)
}

func TestUnlockWorksWithCancelledContext(t *testing.T) {
	cli := client(t)
	m := newMutex(t, cli, "unlock-cancelled")
	l, err := m.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with cancelled ctx: %v", err)
	}
	if got := etcdtest.Keys(t, cli, m.Prefix()); len(got) != 0 {
		t.Fatalf("keys after Unlock = %v", got)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrReleased) {
		t.Fatalf("cause after Unlock = %v, want ErrReleased", cause)
	}
}

func TestContextOutlivesLockCtx(t *testing.T) {
	cli := client(t)
	m := newMutex(t, cli, "ctx-outlives")
	ctx, cancel := context.WithCancel(context.Background())
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// A round trip through etcd, after which a wrongly derived context
	// would long have ended.
	if _, err := l.Txn(etcdtest.Context(t, 5*time.Second)).Commit(); err != nil {
		t.Fatal(err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("Lock's Context ended with the ctx given to Lock: %v", context.Cause(l.Context()))
	}
	_ = l.Unlock(context.Background())
}

func TestLockReturnsPromptlyWhenCtxEnds(t *testing.T) {
	cli := client(t)
	holder := newMutex(t, cli, "prompt")
	h, err := holder.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(context.Background())
	waiter := newMutex(t, client(t), "prompt")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx)
		errc <- err
	}()
	waitKeys(t, cli, holder.Prefix(), 2)
	cancel()
	start := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock after cancel = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("Lock returned %v after ctx ended, want within 100ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return after ctx ended")
	}
	waitKeys(t, cli, holder.Prefix(), 1)
}

func TestLockReturnsPromptlyWhileEtcdUnreachable(t *testing.T) {
	cli := client(t)
	holder := newMutex(t, cli, "unreachable")
	h, err := holder.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(context.Background())
	pcli, proxy := proxied(t)
	waiter := newMutex(t, pcli, "unreachable", mutex.WithTTL(10*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx)
		errc <- err
	}()
	waitKeys(t, cli, holder.Prefix(), 2)
	proxy.Blackhole()
	cancel()
	start := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("Lock returned %v after ctx ended with etcd unreachable, want within 100ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return while etcd was unreachable")
	}
	// Once etcd is reachable again the waiter's key is cleaned up.
	proxy.Restore()
	waitKeys(t, cli, holder.Prefix(), 1)
}

func TestLockFailsWhenLeaseEndsWhileWaiting(t *testing.T) {
	cli := client(t)
	holder := newMutex(t, cli, "lease-while-waiting")
	h, err := holder.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(context.Background())
	waiter := newMutex(t, client(t), "lease-while-waiting")
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(etcdtest.Context(t, 20*time.Second))
		errc <- err
	}()
	waitKeys(t, cli, holder.Prefix(), 2)
	ws, err := holder.Waiters(etcdtest.Context(t, 5*time.Second))
	if err != nil || len(ws) != 1 {
		t.Fatalf("Waiters = %v, %v", ws, err)
	}
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), ws[0].Lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, mutex.ErrLost) || !errors.Is(err, mutex.ErrLeaseExpired) {
			t.Fatalf("Lock after its lease was revoked = %v, want ErrLost and ErrLeaseExpired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock kept waiting after its lease was revoked")
	}
	if got := etcdtest.Keys(t, cli, holder.Prefix()); len(got) != 1 || got[0] != h.Key() {
		t.Fatalf("keys = %v, want only the holder's", got)
	}
	// The same Mutex replaces its lost lease on the next Lock.
	if err := h.Unlock(etcdtest.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := waiter.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Lock after the lease was replaced: %v", err)
	}
	if l.Lease() == ws[0].Lease {
		t.Fatal("Lock reused the revoked lease")
	}
	_ = l.Unlock(context.Background())
}

func TestWaitingSurvivesCompaction(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	holder := newMutex(t, cli, "compaction")
	h, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newMutex(t, client(t), "compaction")
	got := make(chan *mutex.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitKeys(t, cli, holder.Prefix(), 2)
	for range 5 { // history the compaction removes
		if _, err := cli.Put(ctx, "/data/compaction-filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Compact(ctx, cli); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("waiter failed")
		}
		if l.Token() <= h.Token() {
			t.Fatalf("token %d not above %d", l.Token(), h.Token())
		}
		_ = l.Unlock(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never acquired after compaction")
	}
}

func TestCloseReleasesHeldLocksAndRefusesNewOnes(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	m, err := mutex.New(cli, "close")
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		waiting <- err
	}()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrReleased) {
		t.Fatalf("held lock's cause after Close = %v, want ErrReleased", cause)
	}
	if err := <-waiting; !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("waiting Lock during Close = %v, want ErrClosed", err)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("Lock after Close = %v, want ErrClosed", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("TryLock after Close = %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if got := etcdtest.Keys(t, cli, m.Prefix()); len(got) != 0 {
		t.Fatalf("keys after Close = %v", got)
	}
}

func TestDo(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	var seen fencing.Token
	err := mutex.Do(ctx, cli, "do", func(ctx context.Context, tok fencing.Token) error {
		seen = tok
		if got := etcdtest.Keys(t, cli, "/baton/v1/lock/do/"); len(got) != 1 {
			t.Errorf("keys during Do = %v", got)
		}
		return nil
	})
	if err != nil || seen == 0 {
		t.Fatalf("Do = %v, token %d", err, seen)
	}
	if got := etcdtest.Keys(t, cli, "/baton/v1/lock/do/"); len(got) != 0 {
		t.Fatalf("keys after Do = %v", got)
	}
	boom := errors.New("boom")
	if err := mutex.Do(ctx, cli, "do", func(context.Context, fencing.Token) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	// A loss while fn runs is reported even when fn returns nil.
	// (The admin's calls use the test's ctx: fn's ends with the revoke,
	// possibly before the admin hears its reply.)
	err = mutex.Do(ctx, cli, "do", func(fctx context.Context, tok fencing.Token) error {
		resp, _ := cli.Get(ctx, "/baton/v1/lock/do/", clientv3.WithPrefix())
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Error(err)
		}
		<-fctx.Done()
		return nil
	})
	if !errors.Is(err, mutex.ErrNotHeld) || !errors.Is(err, mutex.ErrLeaseExpired) {
		t.Fatalf("Do after loss = %v, want ErrNotHeld and ErrLeaseExpired", err)
	}
	if err := mutex.Do(ctx, cli, "", func(context.Context, fencing.Token) error { return nil }); !errors.Is(err, mutex.ErrInvalid) {
		t.Fatalf("Do with empty name = %v", err)
	}
	if err := mutex.Do(ctx, cli, "do", nil); !errors.Is(err, mutex.ErrInvalid) {
		t.Fatalf("Do with nil fn = %v", err)
	}
}
