package mutex_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func TestNamesNeverShareKeys(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	pairs := [][2]string{{"jobs", "jobs/x"}, {"a", "a%2F"}, {"a/", "a%2F"}, {"名前", "名前/子"}}
	for _, p := range pairs {
		first := newMutex(t, cli, p[0])
		second := newMutex(t, client(t), p[1])
		l1, err := first.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", p[0], err)
		}
		l2, err := second.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q) while %q is held: %v", p[1], p[0], err)
		}
		w1, _ := first.Waiters(ctx)
		h1, _ := first.Holder(ctx)
		if len(w1) != 0 || h1.Key != l1.Key() {
			t.Fatalf("lock %q sees %v / %v, want only its own key", p[0], h1, w1)
		}
		_ = l1.Unlock(ctx)
		_ = l2.Unlock(ctx)
	}
}

func TestNamespacesIsolate(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	a := newMutex(t, cli, "shared-name", mutex.WithNamespace("team-a"))
	b := newMutex(t, client(t), "shared-name", mutex.WithNamespace("team-b"))
	la, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("same name in another namespace: %v", err)
	}
	if a.Prefix() != "/team-a/v1/lock/shared-name/" {
		t.Fatalf("prefix = %s", a.Prefix())
	}
	locks, err := mutex.List(ctx, cli, mutex.WithNamespace("team-a"))
	if err != nil || len(locks) != 1 || locks[0].Name != "shared-name" || locks[0].Holder.Key != la.Key() {
		t.Fatalf("List(team-a) = %+v, %v", locks, err)
	}
	_ = la.Unlock(ctx)
	_ = lb.Unlock(ctx)
}

func TestListHolderAndWaiters(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	ns := mutex.WithNamespace("list")
	h := newMutex(t, cli, "report/nightly", ns, mutex.WithTTL(9*time.Second))
	l, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := newMutex(t, client(t), "report/nightly", ns)
	go func() {
		if l, err := w.Lock(ctx); err == nil {
			_ = l.Unlock(ctx)
		}
	}()
	waitKeys(t, cli, h.Prefix(), 2)
	other := newMutex(t, cli, "other", ns)
	lo, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	locks, err := mutex.List(ctx, cli, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 2 || locks[0].Name != "other" || locks[1].Name != "report/nightly" {
		t.Fatalf("List = %+v", locks)
	}
	rn := locks[1]
	if rn.Holder.Key != l.Key() || rn.Holder.Token != l.Token() || len(rn.Waiters) != 1 {
		t.Fatalf("report/nightly = %+v", rn)
	}
	if rn.Holder.TTL <= 0 || rn.Holder.TTL > 9*time.Second {
		t.Fatalf("holder TTL left = %v", rn.Holder.TTL)
	}
	if rn.Holder.Identity == "" {
		t.Fatal("holder identity empty")
	}
	_ = lo.Unlock(ctx)
	_ = l.Unlock(ctx)
	empty := newMutex(t, cli, "never-locked", ns)
	if hc, err := empty.Holder(ctx); err != nil || hc.Key != "" {
		t.Fatalf("Holder of a free lock = %+v, %v; want zero", hc, err)
	}
}
