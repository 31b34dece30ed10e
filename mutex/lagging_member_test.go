package mutex_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// laggingWatcher makes single-key watches behave as if served by a member
// whose applied revision is lag: Created carries header lag and the events
// start at lag+1 (exactly what a follower behind the leader does).
type laggingWatcher struct {
	clientv3.Watcher
	lag atomic.Int64
}

func (l *laggingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	lag := l.lag.Load()
	if lag == 0 || clientv3.OpGet(key, opts...).RangeBytes() != nil {
		return l.Watcher.Watch(ctx, key, opts...)
	}
	in := l.Watcher.Watch(ctx, key, append(opts, clientv3.WithRev(lag+1))...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.Created {
				wr.Header.Revision = lag
			}
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// The holder's session locks, unlocks and locks again (the same lease key);
// a waiter whose watch of that key is served by a member behind the unlock
// gets the earlier incarnation's deletion, and must not take it for the
// holder's: it acquires only once the holder unlocks.
func TestWaiterIgnoresAnEarlierIncarnationsDeletion(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	hcli := client(t)
	a := newMutex(t, hcli, "lagging-member")
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lag := int64(la.Token()) // the lagging member applied the first lock, not its unlock
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if la, err = a.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	wcli := client(t)
	lw := &laggingWatcher{Watcher: wcli.Watcher}
	lw.lag.Store(lag)
	wcli.Watcher = lw // before any watch of this client
	b := newMutex(t, wcli, "lagging-member")
	type result struct {
		l   *mutex.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		lb, err := b.Lock(ctx)
		got <- result{lb, err}
	}()
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("the waiter acquired (token %d) while the holder (token %d) holds", r.l.Token(), la.Token())
		}
		t.Fatal(r.err)
	case <-time.After(2 * time.Second): // still waiting: right
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never acquired after the holder's Unlock")
	}
}
