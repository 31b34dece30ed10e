package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

func TestMaxHeldCapsKeysPerSession(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	// The cap is session-wide: it counts the keys of every Mutex sharing
	// one session.
	sess, err := bsession.New(cli, bsession.WithTTL(10*time.Second), bsession.WithMaxHeld(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	var held []*mutex.Lock
	for i := range 3 {
		m := newMutex(t, cli, fmt.Sprintf("quota-%d", i), mutex.WithSession(sess), mutex.WithMaxHeld(3))
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatalf("lock %d within the quota: %v", i, err)
		}
		held = append(held, l)
	}
	over := newMutex(t, cli, "quota-3", mutex.WithSession(sess), mutex.WithMaxHeld(3))
	if _, err := over.Lock(ctx); !errors.Is(err, mutex.ErrTooManyHeld) {
		t.Fatalf("fourth lock = %v, want ErrTooManyHeld", err)
	}
	if got := etcdtest.Keys(t, cli, over.Prefix()); len(got) != 0 {
		t.Fatalf("refused lock left keys %v", got)
	}
	_ = held[0].Unlock(ctx)
	l, err := over.Lock(ctx)
	if err != nil {
		t.Fatalf("lock after one was released: %v", err)
	}
	_ = l.Unlock(ctx)
	if _, err := mutex.New(cli, "q", mutex.WithMaxHeld(-1)); !errors.Is(err, mutex.ErrInvalid) {
		t.Fatalf("WithMaxHeld(-1) = %v", err)
	}
}

func TestBorrowedSessionLockAfterLossWithoutUnlock(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	sess := session(t, cli, 10)
	m := newMutex(t, cli, "lost-no-unlock", mutex.WithSession(sess))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, l.Done(), 5*time.Second, "loss")
	// The lost handle is never unlocked; the next Lock must not wait for it.
	l2, err := m.Lock(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatalf("Lock after an abandoned lost handle: %v", err)
	}
	if l2.Lease() != sess.Lease() {
		t.Fatal("borrowed session not used")
	}
	_ = l2.Unlock(ctx)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
		t.Fatal("Close closed a borrowed session")
	default:
	}
}

func TestBorrowedSessionClosedByItsOwner(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	m := newMutex(t, cli, "owner-closes", mutex.WithSession(sess))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = sess.Close()
	etcdtest.Within(t, l.Done(), 5*time.Second, "loss after the owner closed the session")
	if cause := context.Cause(l.Context()); !errors.Is(cause, mutex.ErrLost) {
		t.Fatalf("cause = %v", cause)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, mutex.ErrLost) || !errors.Is(err, mutex.ErrSessionClosed) {
		t.Fatalf("Lock on a closed borrowed session = %v, want ErrLost and ErrSessionClosed", err)
	}
}

// A release's deletion, seen late by the session's watch stream, must
// not end the next hold of the same key (same lease, same name).
func TestRelockingOnASessionIsNotEndedByTheEarlierRelease(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	sess := session(t, cli, 10)
	// Another hold keeps the session's watch stream open throughout.
	other := newMutex(t, cli, "relock-other", mutex.WithSession(sess))
	keep, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Unlock(ctx)
	m := newMutex(t, cli, "relock", mutex.WithSession(sess))
	for i := range 30 {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A round trip, during which the watch delivers the release.
		if _, err := again.Txn(ctx).Commit(); err != nil {
			t.Fatalf("cycle %d: fenced txn on the re-acquired lock: %v", i, err)
		}
		select {
		case <-again.Done():
			t.Fatalf("cycle %d: re-acquired lock ended: %v", i, context.Cause(again.Context()))
		default:
		}
		if err := again.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
