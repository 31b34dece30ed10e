package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// Two Mutexes locking one name through one etcd session, with different
// identities, exclude each other: the second waits for the first.
func TestTwoMutexesOnOneEtcdSessionExclude(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	cs := session(t, cli, 10)
	a := newMutex(t, cli, "one-lease-excl", mutex.WithSession(cs), mutex.WithIdentity("a"))
	b := newMutex(t, cli, "one-lease-excl", mutex.WithSession(cs), mutex.WithIdentity("b"))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	lb, err := b.Lock(wctx)
	cancel()
	if err == nil {
		t.Fatalf("second Mutex on the same etcd session locked a held name (tokens %d and %d)", la.Token(), lb.Token())
	}
	if la.Context().Err() != nil {
		t.Fatalf("first lock ended: %v", context.Cause(la.Context()))
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err = b.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the first was released: %v", err)
	}
	_ = lb.Unlock(ctx)
}

// An enqueue through a shared etcd session that fails while etcd is
// unreachable never deletes the key another Mutex holds on that lease.
func TestFailedEnqueueOnASharedLeaseLeavesTheHoldersKey(t *testing.T) {
	pcli, proxy := proxied(t)
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	cs := session(t, pcli, 10)
	a := newMutex(t, pcli, "one-lease-enqueue", mutex.WithSession(cs), mutex.WithIdentity("a"))
	b := newMutex(t, pcli, "one-lease-enqueue", mutex.WithSession(cs), mutex.WithIdentity("b"))
	lb, err := b.Lock(ctx) // b has checked the lease and goes straight to its enqueue later
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Lock(wctx)
	cancel()
	proxy.Restore()
	if err == nil {
		t.Fatal("Lock succeeded through a blackholed proxy")
	}
	// Any background cleanup of the failed enqueue runs once etcd answers.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		resp, err := cli.Get(ctx, la.Key())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(la.Token()) {
			t.Fatalf("the holder's key %s was deleted by another Mutex's failed enqueue", la.Key())
		}
	}
	if la.Context().Err() != nil {
		t.Fatalf("the holder lost its lock: %v", context.Cause(la.Context()))
	}
}

// Close of a session.Wrap session returns within a few seconds while etcd
// is unreachable, even with a key deletion pending.
func TestWrappedSessionCloseIsBoundedWhileEtcdIsUnreachable(t *testing.T) {
	pcli, proxy := proxied(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	cs := session(t, pcli, 10)
	ws, err := bsession.Wrap(cs)
	if err != nil {
		t.Fatal(err)
	}
	m := newMutex(t, pcli, "one-lease-wrap-close", mutex.WithSession(ws))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	defer proxy.Restore()
	uctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_ = l.Unlock(uctx) // fails: the deletion continues in the background
	cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- ws.Close() }()
	select {
	case <-done:
	case <-time.After(4 * time.Second):
		t.Fatalf("session.Wrap session's Close had not returned after %v with etcd unreachable", time.Since(start))
	}
}

// A key queued on a borrowed lease, left by Close while etcd is
// unreachable, is deleted once etcd is back, while the caller's session
// lives on.
func TestKeyLeftByCloseOnABorrowedLeaseIsDeletedWhenEtcdIsBack(t *testing.T) {
	pcli, proxy := proxied(t)
	cli := client(t)
	ctx := etcdtest.Context(t, 40*time.Second)
	cs := session(t, pcli, 10)
	m, err := mutex.New(pcli, "one-lease-close-outage", mutex.WithSession(cs))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	_ = m.Close()
	proxy.Restore()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(ctx, l.Key())
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still in etcd 10s after etcd came back; the caller's session is alive: %v", l.Key(), !isDone(cs.Done()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One revision is one state for Observe: an admin's prefix delete of the
// holder and its waiters reads as "free", and one transaction that deletes
// the holder's key and puts another's reads as that new holder.
func TestObserveSendsTheOutcomeOfEachRevision(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	m := newMutex(t, cli, "observe-revision")
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(context.Background(), lease.ID)
	put := func(k, v string) {
		if _, err := cli.Put(ctx, m.Prefix()+k, v, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	ch := m.Observe(ctx)
	var last int64
	if h := nextHolder(t, ch, &last); h.Key != "" {
		t.Fatalf("first state %+v, want free", h)
	}
	put("a", "A")
	put("b", "B")
	put("c", "C")
	if h := nextHolder(t, ch, &last); h.Identity != "A" {
		t.Fatalf("holder %+v, want A", h)
	}
	if _, err := cli.Delete(ctx, m.Prefix(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if h := nextHolder(t, ch, &last); h.Key != "" {
		t.Fatalf("after a prefix delete of every key: %+v, want free", h)
	}
	put("d", "D")
	if h := nextHolder(t, ch, &last); h.Identity != "D" {
		t.Fatalf("holder %+v, want D", h)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpDelete(m.Prefix()+"d"), clientv3.OpPut(m.Prefix()+"e", "E", clientv3.WithLease(lease.ID))).Commit(); err != nil {
		t.Fatal(err)
	}
	if h := nextHolder(t, ch, &last); h.Identity != "E" {
		t.Fatalf("after one txn deleted D and put E: %+v, want E", h)
	}
}

// Metric series shared by two open Mutexes (one label, or one name) stay
// while either is open.
func TestClosingOneMutexKeepsTheSeriesItShares(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := newRegistry()
	a := newMutex(t, cli, "shared-label-a", mutex.WithRegisterer(reg), mutex.WithMetricLabel("jobs"))
	b := newMutex(t, cli, "shared-label-b", mutex.WithRegisterer(reg), mutex.WithMetricLabel("jobs"))
	for _, m := range []*mutex.Mutex{a, b} {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	_ = a.Close()
	if n := countSeries(t, reg, "baton_lock_acquire_total", "jobs"); n == 0 {
		t.Fatal("closing one Mutex deleted the acquire_total series of another open one with the same label")
	}
	if n := countSeries(t, reg, "baton_lock_hold_duration_seconds", "jobs"); n == 0 {
		t.Fatal("closing one Mutex deleted the hold series of another open one with the same label")
	}
	_ = b.Close()
	if n := countSeries(t, reg, "baton_lock_acquire_total", "jobs"); n != 0 {
		t.Fatalf("%d acquire_total series left after both Mutexes closed", n)
	}
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// countSeries counts the series of metric whose name label is name.
func countSeries(t *testing.T, reg *prometheus.Registry, metric, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "name" && lp.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}
