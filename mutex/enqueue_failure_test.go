package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// A Lock whose enqueue fails on a lease shared with the holder must not
// delete the holder's key. Two Mutexes of one name share one etcd session
// (so one lease, one key name); the second's enqueue is cut off by the
// proxy before it is sent and its ctx ends while it is in flight: a
// transient failure, forced every trial. Once the link is back and the
// failed Mutex is closed (so whatever cleanup it started has run), the
// holder must still hold: its key present with its token, its Context
// alive, its fenced transaction applied. After the holder releases, no key
// may remain (a late enqueue must not leave a key nobody owns).
func TestFailedEnqueueOnSharedLeaseKeepsTheHoldersKey(t *testing.T) {
	const trials = 5
	direct := client(t)
	pcli, proxy := proxied(t)
	cs := session(t, pcli, 20)
	for i := range trials {
		ctx := etcdtest.Context(t, 30*time.Second)
		name := fmt.Sprintf("enqueue-failure-%d", i)
		a := newMutex(t, pcli, name, mutex.WithSession(cs))
		b := newMutex(t, pcli, name, mutex.WithSession(cs))
		la, err := a.Lock(ctx)
		if err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		// The other Mutex is ready to enqueue: its TryLock has reached
		// etcd and found the lock held.
		if lb, err := b.TryLock(ctx); err == nil {
			_ = lb.Unlock(ctx)
			t.Fatalf("trial %d: TryLock returned a lock while another Mutex on the same etcd session holds", i)
		} else if !errors.Is(err, mutex.ErrLocked) {
			t.Fatalf("trial %d: TryLock = %v, want ErrLocked", i, err)
		}

		proxy.Blackhole()
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		lb, lockErr := b.Lock(lctx)
		cancel()
		proxy.Restore()
		if lockErr == nil {
			_ = lb.Unlock(ctx)
			t.Fatalf("trial %d: Lock with its enqueue cut off returned a lock", i)
		}
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		select {
		case <-closed:
		case <-time.After(15 * time.Second):
			t.Fatalf("trial %d: Close of the Mutex whose enqueue failed did not return within 15s", i)
		}

		resp, err := direct.Get(ctx, la.Key())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(la.Token()) {
			t.Fatalf("trial %d: the failed Lock (%v) deleted the holder's key %s (token %d); etcd has %v",
				i, lockErr, la.Key(), la.Token(), resp.Kvs)
		}
		select {
		case <-la.Done():
			t.Fatalf("trial %d: the holder's Context ended after another Mutex's enqueue failed: %v", i, context.Cause(la.Context()))
		default:
		}
		if _, err := la.Txn(ctx).Commit(); err != nil {
			t.Fatalf("trial %d: the holder's fenced txn after another Mutex's enqueue failed: %v", i, err)
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatalf("trial %d: the holder's Unlock: %v", i, err)
		}
		if keys := etcdtest.Keys(t, direct, a.Prefix()); len(keys) != 0 {
			t.Fatalf("trial %d: keys nobody owns after the holder released: %v", i, keys)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
