package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func delayed(t *testing.T, cli *clientv3.Client, name string, d time.Duration) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(cli, name, mutex.WithNamespace("delay"), mutex.WithTTL(5*time.Second), mutex.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// lockAfter locks m in the background and returns when it acquired.
func lockAfter(ctx context.Context, t *testing.T, m *mutex.Mutex) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
			close(at)
			return
		}
		at <- time.Now()
		_ = l.Unlock(context.Background())
	}()
	time.Sleep(200 * time.Millisecond) // queued behind the holder
	return at
}

// TestLockDelayAfterUncleanLossNotAfterUnlock: a force-deleted holder's key
// or a revoked lease keeps the next holder out for the lost holder's delay
// (counted from when the deletion had returned, which is after etcd
// applied it); a clean Unlock lets it in at once.
func TestLockDelayAfterUncleanLossNotAfterUnlock(t *testing.T) {
	const d = 2 * time.Second
	cases := []struct {
		name    string
		end     func(ctx context.Context, cli *clientv3.Client, l *mutex.Lock) error
		delayed bool
	}{
		{"force delete", func(ctx context.Context, cli *clientv3.Client, l *mutex.Lock) error {
			_, err := cli.Delete(ctx, l.Key())
			return err
		}, true},
		{"lease revoked", func(ctx context.Context, cli *clientv3.Client, l *mutex.Lock) error {
			_, err := cli.Revoke(ctx, l.Lease())
			return err
		}, true},
		{"unlock", func(ctx context.Context, _ *clientv3.Client, l *mutex.Lock) error { return l.Unlock(ctx) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := etcdtest.Context(t, 30*time.Second)
			cli := client(t)
			name := "ld-" + tc.name
			holder := delayed(t, cli, name, d)
			l, err := holder.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			at := lockAfter(ctx, t, delayed(t, client(t), name, d))
			if err := tc.end(ctx, cli, l); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			got, ok := <-at
			if !ok {
				return
			}
			took := got.Sub(ended)
			switch {
			case tc.delayed && took < d:
				t.Fatalf("next holder in after %v; want at least the %v delay", took, d)
			case !tc.delayed && took > time.Second:
				t.Fatalf("next holder in %v after a clean Unlock; want no delay", took)
			}
			t.Logf("next holder in %v", took)
		})
	}
}

// TestLockDelayOfTheLostHolderApplies: contenders whose delays differ
// agree: a waiter with a 2s delay waits the 3s of the holder that was lost.
func TestLockDelayOfTheLostHolderApplies(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	l, err := delayed(t, cli, "ld-mismatch", 3*time.Second).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := lockAfter(ctx, t, delayed(t, client(t), "ld-mismatch", 2*time.Second))
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	if got, ok := <-at; ok && got.Sub(ended) < 3*time.Second {
		t.Fatalf("waiter with a 2s delay in after %v; the lost holder's 3s applies", got.Sub(ended))
	}
}

// TestLockDelayWaitEndsWithCtxAndLeavesNothing: a Lock whose ctx ends
// during the delay returns the ctx's error, leaves no key and no record
// behind, and the delay still runs for the next one.
func TestLockDelayWaitEndsWithCtxAndLeavesNothing(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	const d = 3 * time.Second
	l, err := delayed(t, cli, "ld-cancel", d).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	w := delayed(t, client(t), "ld-cancel", d)
	if _, err := w.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock during the delay with a 1s ctx: %v; want DeadlineExceeded", err)
	}
	if g, _ := cli.Get(ctx, w.Prefix(), clientv3.WithPrefix()); len(g.Kvs) != 0 {
		t.Fatalf("key left behind: %s", g.Kvs[0].Key)
	}
	if g, _ := cli.Get(ctx, "/delay/v1/delay/lock/ld-cancel/held/", clientv3.WithPrefix()); len(g.Kvs) != 0 {
		t.Fatalf("record left behind: %s", g.Kvs[0].Key)
	}
	l2, err := w.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(ended); took < d {
		t.Fatalf("second waiter in after %v; want at least %v", took, d)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := cli.Get(ctx, "/delay/v1/delay/lock/ld-cancel/", clientv3.WithPrefix()); len(g.Kvs) != 0 {
		t.Fatalf("state left after a clean Unlock: %s", g.Kvs[0].Key)
	}
}

func TestWithLockDelayBounds(t *testing.T) {
	cli := client(t)
	for _, tc := range []struct {
		d       time.Duration
		wantErr bool
	}{{0, false}, {2 * time.Second, false}, {time.Hour, false}, {time.Second, true}, {-time.Second, true}, {2500 * time.Millisecond, true}, {time.Hour + time.Second, true}} {
		m, err := mutex.New(cli, "ld-bounds", mutex.WithLockDelay(tc.d))
		if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, mutex.ErrInvalid) {
			t.Errorf("WithLockDelay(%v): %v", tc.d, err)
		}
		if m != nil {
			_ = m.Close()
		}
	}
}
