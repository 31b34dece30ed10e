package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/etcdtest"
)

// An Unlock that could not reach etcd deletes the key in the background;
// once that deletion is done the name is free again for the same Mutex,
// without Unlock being called a second time.
func TestUnlockDeletedInTheBackgroundFreesTheName(t *testing.T) {
	pcli, proxy := proxied(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	m := newMutex(t, pcli, "resv-unlock")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	uctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = l.Unlock(uctx)
	cancel()
	proxy.Restore()
	if err == nil {
		t.Fatal("Unlock succeeded with etcd unreachable")
	}
	etcdtest.WaitKeys(t, client(t), m.Prefix(), 0) // the background deletion is done
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l2, err := m.Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after the background deletion of the previous key = %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first handle, unlocked again, says it was released.
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock of the handle deleted in the background = %v", err)
	}
}
