package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// Two Mutexes of one name given the same etcd *concurrency.Session must
// exclude each other like two processes do, whatever identity each
// writes: the second Lock waits while the first holds, TryLock says
// ErrLocked, and the second acquires (with a higher token) only after the
// first releases. etcd's key is one per lease and prefix, so without
// baton keeping them apart both would "hold" one key with one token.
func TestLocksThroughOneEtcdSessionExclude(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idA    string
		idB    string
		suffix string
	}{
		{name: "different identities", idA: "replica-a", idB: "replica-b", suffix: "diff"},
		{name: "same identity", idA: "replica", idB: "replica", suffix: "same"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := client(t)
			ctx := etcdtest.Context(t, 30*time.Second)
			cs := session(t, cli, 10)
			name := "shared-cs-exclusion-" + tc.suffix
			a := newMutex(t, cli, name, mutex.WithSession(cs), mutex.WithIdentity(tc.idA))
			b := newMutex(t, cli, name, mutex.WithSession(cs), mutex.WithIdentity(tc.idB))

			la, err := a.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			lb, err := b.Lock(wctx)
			cancel()
			if err == nil {
				_ = lb.Unlock(ctx)
				t.Fatalf("second Lock through the same etcd session returned while the first holds: both on key %s, tokens %d and %d",
					la.Key(), la.Token(), lb.Token())
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("second Lock while the first holds = %v, want it to wait until its ctx ends (DeadlineExceeded)", err)
			}
			if lb, err := b.TryLock(ctx); err == nil {
				_ = lb.Unlock(ctx)
				t.Fatalf("TryLock through the same etcd session returned a lock while another Mutex holds: both on key %s, tokens %d and %d",
					la.Key(), la.Token(), lb.Token())
			} else if !errors.Is(err, mutex.ErrLocked) {
				t.Fatalf("TryLock while another Mutex on the same etcd session holds = %v, want ErrLocked", err)
			}

			select {
			case <-la.Done():
				t.Fatalf("the holder's Context ended after the other Mutex's Lock gave up: %v", context.Cause(la.Context()))
			default:
			}
			if _, err := la.Txn(ctx).Commit(); err != nil {
				t.Fatalf("the holder's fenced txn after the other Mutex's Lock gave up: %v", err)
			}

			got := make(chan error, 1)
			var lb2 *mutex.Lock
			go func() {
				var err error
				lb2, err = b.Lock(ctx)
				got <- err
			}()
			select {
			case err := <-got:
				if err == nil {
					_ = lb2.Unlock(ctx)
				}
				t.Fatalf("second Lock returned (%v) while the first still holds", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("second Lock after the first released: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("second Lock did not acquire within 10s of the first's release")
			}
			if lb2.Token() <= la.Token() {
				t.Fatalf("second holder's token %d not above the first's %d", lb2.Token(), la.Token())
			}
			h, err := a.Holder(ctx)
			if err != nil || h.Identity != tc.idB || h.Token != lb2.Token() {
				t.Fatalf("Holder = %+v, %v; want identity %q, token %d", h, err, tc.idB, lb2.Token())
			}
			if err := lb2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if keys := etcdtest.Keys(t, cli, a.Prefix()); len(keys) != 0 {
				t.Fatalf("keys left after both released: %v", keys)
			}
		})
	}
}
