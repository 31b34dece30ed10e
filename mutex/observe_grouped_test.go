package mutex_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// observeUntil receives states from ch until one satisfies done or 10 s
// pass, and returns every state received (the last satisfies done unless
// the deadline passed).
func observeUntil(t *testing.T, ch <-chan mutex.Holder, done func(mutex.Holder) bool) (states []mutex.Holder, ok bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case h, open := <-ch:
			if !open {
				t.Fatalf("Observe channel closed early; states so far: %s", fmtHolders(states))
			}
			states = append(states, h)
			if done(h) {
				return states, true
			}
		case <-deadline:
			return states, false
		}
	}
}

func fmtHolders(hs []mutex.Holder) string {
	out := "["
	for i, h := range hs {
		if i > 0 {
			out += ", "
		}
		if h.IsZero() {
			out += fmt.Sprintf("free@%d", h.Revision)
		} else {
			out += fmt.Sprintf("%s(token %d)@%d", h.Identity, h.Token, h.Revision)
		}
	}
	return out + "]"
}

// An admin's `del --prefix` removes the holder and every waiter in one
// revision: Observe must report "free" at that revision, and never a
// waiter that was deleted in the same step as the holder.
func TestObserveReportsFreeAfterOneRevisionDeleteOfHolderAndWaiters(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	const name = "observe-del-prefix"
	watcher := newMutex(t, client(t), name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := watcher.Observe(octx)
	if states, ok := observeUntil(t, obs, mutex.Holder.IsZero); !ok {
		t.Fatalf("Observe's first state is not free: %s", fmtHolders(states))
	}
	a := newMutex(t, client(t), name, mutex.WithIdentity("replica-a"))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if states, ok := observeUntil(t, obs, func(h mutex.Holder) bool { return h.Key == la.Key() }); !ok {
		t.Fatalf("Observe never reported replica-a holding: %s", fmtHolders(states))
	}
	waiting := make(chan error, 2)
	for _, id := range []string{"replica-b", "replica-c"} {
		m := newMutex(t, client(t), name, mutex.WithIdentity(id))
		go func() {
			l, err := m.Lock(ctx)
			if err == nil {
				_ = l.Unlock(ctx)
				err = fmt.Errorf("%s acquired", id)
			}
			waiting <- err
		}()
	}
	etcdtest.WaitKeys(t, cli, watcher.Prefix(), 3)

	del, err := cli.Delete(ctx, watcher.Prefix(), clientv3.WithPrefix())
	if err != nil || del.Deleted != 3 {
		t.Fatalf("delete --prefix: %+v, %v", del, err)
	}
	states, ok := observeUntil(t, obs, mutex.Holder.IsZero)
	if !ok {
		t.Fatalf("Observe never reported free within 10s of one delete of holder and waiters at revision %d; it sent %s",
			del.Header.Revision, fmtHolders(states))
	}
	if len(states) != 1 || states[0].Revision != del.Header.Revision {
		t.Fatalf("after one delete of holder and waiters at revision %d, Observe sent %s; want only free at that revision",
			del.Header.Revision, fmtHolders(states))
	}
	for range 2 {
		select {
		case err := <-waiting:
			if err == nil {
				t.Fatal("a waiter's Lock returned no error after its key was deleted")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter's Lock did not return within 10s of its key's deletion")
		}
	}
}

// One transaction deletes the holder's key and puts another contender's:
// Observe must report the new holder at that revision, not "free".
func TestObserveReportsTheHolderPutInTheTxnThatDeletedThePrevious(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	const name = "observe-swap-txn"
	watcher := newMutex(t, client(t), name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := watcher.Observe(octx)
	if states, ok := observeUntil(t, obs, mutex.Holder.IsZero); !ok {
		t.Fatalf("Observe's first state is not free: %s", fmtHolders(states))
	}
	a := newMutex(t, client(t), name, mutex.WithIdentity("replica-a"))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if states, ok := observeUntil(t, obs, func(h mutex.Holder) bool { return h.Key == la.Key() }); !ok {
		t.Fatalf("Observe never reported replica-a holding: %s", fmtHolders(states))
	}

	grant, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), grant.ID) })
	cKey := watcher.Prefix() + strconv.FormatInt(int64(grant.ID), 16)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(la.Key()), "=", int64(la.Token()))).
		Then(clientv3.OpDelete(la.Key()), clientv3.OpPut(cKey, "replica-c", clientv3.WithLease(grant.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("swap txn: %+v, %v", resp, err)
	}
	swap := resp.Header.Revision
	states, ok := observeUntil(t, obs, func(h mutex.Holder) bool { return h.Key == cKey })
	if !ok {
		t.Fatalf("Observe never reported replica-c (key %s), put in the txn that deleted replica-a's key at revision %d; within 10s it sent %s",
			cKey, swap, fmtHolders(states))
	}
	if len(states) != 1 || states[0].Revision != swap || states[0].Identity != "replica-c" || int64(states[0].Token) != swap {
		t.Fatalf("after the txn at revision %d that deleted replica-a's key and put replica-c's, Observe sent %s; want only replica-c (token %d) at that revision",
			swap, fmtHolders(states), swap)
	}
}
