package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
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

// A failed Lock leaves its key's deletion to the background; closing the
// Mutex before etcd answers must not leave the key reserved for good on a
// shared session: another Mutex of the same name on it acquires once etcd
// is back.
func TestClosedMutexLeavesNoReservationOnASharedSession(t *testing.T) {
	pcli, proxy := proxied(t)
	ctx := etcdtest.Context(t, 40*time.Second)
	sess, err := bsession.New(pcli, bsession.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	a := newMutex(t, pcli, "resv-close", mutex.WithSession(sess))
	l, err := a.Lock(ctx) // grants the session's lease
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = a.Lock(lctx)
	cancel()
	if err == nil {
		t.Fatal("Lock succeeded with etcd unreachable")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	b := newMutex(t, pcli, "resv-close", mutex.WithSession(sess))
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := b.Lock(bctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the closed Mutex left its key reserved on the shared session")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
