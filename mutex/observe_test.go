package mutex_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func nextHolder(t *testing.T, ch <-chan mutex.Holder, last *int64) mutex.Holder {
	t.Helper()
	select {
	case h, ok := <-ch:
		if !ok {
			t.Fatal("Observe channel closed early")
		}
		if h.Revision <= *last {
			t.Fatalf("state at revision %d after one at %d: not strictly increasing", h.Revision, *last)
		}
		*last = h.Revision
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no Observe update within 10s")
	}
	return mutex.Holder{}
}

func TestObserveSendsEveryHolderAcrossCompaction(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	pcli, proxy := proxied(t)
	watcher := newMutex(t, pcli, "observe")
	octx, stop := context.WithCancel(ctx)
	obs := watcher.Observe(octx)
	var rev int64

	if h := nextHolder(t, obs, &rev); !h.IsZero() {
		t.Fatalf("first state = %+v, want free", h)
	}
	a := newMutex(t, cli, "observe", mutex.WithIdentity("replica-a"))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := nextHolder(t, obs, &rev); h.Key != la.Key() || h.Identity != "replica-a" || h.Token != la.Token() {
		t.Fatalf("after Lock: %+v", h)
	}
	b := newMutex(t, client(t), "observe", mutex.WithIdentity("replica-b"))
	got := make(chan *mutex.Lock, 1)
	go func() {
		lb, err := b.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2) // a waiter is no change of holder
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if h := nextHolder(t, obs, &rev); h.Key != lb.Key() || h.Identity != "replica-b" {
		t.Fatalf("after handoff: %+v", h)
	}

	// Cut off: b goes and c comes, the history is compacted, and the
	// observer resumes with the current holder.
	proxy.Blackhole()
	c := newMutex(t, client(t), "observe", mutex.WithIdentity("replica-c"))
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := c.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Compact(ctx, cli); err != nil {
		t.Fatal(err)
	}
	proxy.DropConnections()
	proxy.Restore()
	if h := nextHolder(t, obs, &rev); h.Key != lc.Key() || h.Identity != "replica-c" {
		t.Fatalf("after compaction: %+v", h)
	}
	if _, err := cli.Revoke(ctx, lc.Lease()); err != nil {
		t.Fatal(err)
	}
	if h := nextHolder(t, obs, &rev); !h.IsZero() {
		t.Fatalf("after the lease's revocation: %+v, want free", h)
	}
	stop()
	for h := range obs {
		t.Fatalf("update %+v after ctx ended", h)
	}
}

func TestObserveEndsOnClose(t *testing.T) {
	m, err := mutex.New(client(t), "observe-close")
	if err != nil {
		t.Fatal(err)
	}
	obs := m.Observe(context.Background())
	<-obs
	_ = m.Close()
	etcdtest.Within(t, drained(obs), 5*time.Second, "Observe's channel closing on Close")
	if _, ok := <-m.Observe(context.Background()); ok {
		t.Fatal("Observe after Close sent a state")
	}
}

func drained(ch <-chan mutex.Holder) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}

func TestIdentityIsStoredAndShownByHolderAndList(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	m := newMutex(t, client(t), "identity", mutex.WithIdentity("nightly@replica-2"), mutex.WithNamespace("ident"))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	h, err := m.Holder(ctx)
	if err != nil || h.Identity != "nightly@replica-2" {
		t.Fatalf("Holder = %+v, %v", h, err)
	}
	list, err := mutex.List(ctx, client(t), mutex.WithNamespace("ident"))
	if err != nil || len(list) != 1 || list[0].Holder.Identity != "nightly@replica-2" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, bad := range []string{"", "a\x1bb", strings.Repeat("x", 257)} {
		if _, err := mutex.New(client(t), "identity", mutex.WithIdentity(bad)); !errors.Is(err, mutex.ErrInvalid) || !strings.Contains(err.Error(), "WithIdentity") {
			t.Errorf("WithIdentity(%q) = %v, want ErrInvalid naming WithIdentity", bad, err)
		}
	}
}
