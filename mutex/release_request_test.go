package mutex_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// TestReleaseRequestReachesTheHolderOnly: a request reaches the holder's
// channel within a watch round trip (p99 logged), carries the reason, who
// asked and the holder's token, is audited, and the next holder never
// sees it.
func TestReleaseRequestReachesTheHolderOnly(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	cli := client(t)
	const ns = "rr"
	m, err := mutex.New(cli, "report", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	asker := client(t)
	var lat []time.Duration
	for i := range 30 {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ch := l.ReleaseRequested()
		if i == 0 {
			select {
			case r := <-ch:
				t.Fatalf("a request before any was made: %+v", r)
			case <-time.After(200 * time.Millisecond):
			}
		}
		start := time.Now()
		if err := mutex.RequestRelease(ctx, asker, "report", fmt.Sprint("deploy ", i), mutex.WithNamespace(ns), mutex.WithIdentity("deployer")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-ch:
			lat = append(lat, time.Since(start))
			if r.Reason != fmt.Sprint("deploy ", i) || r.By != "deployer" || r.Token != int64(l.Token()) || r.Key != l.Key() {
				t.Fatalf("request %+v for holder %s token %d", r, l.Key(), l.Token())
			}
			if g, err := cli.Get(ctx, r.Audit); err != nil || len(g.Kvs) != 1 {
				t.Fatalf("audit record %s: %v %v", r.Audit, g, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the holder was not told within 5s")
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The next holder (same lease, same key) does not see the last request.
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-l.ReleaseRequested():
		t.Fatalf("the next holder saw its predecessor's request: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	_ = l.Unlock(ctx)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("request → holder told: p50 %v p99 %v (n=%d)", lat[len(lat)/2], lat[len(lat)*99/100], len(lat))
	if g, _ := cli.Get(ctx, rbac.RequestAuditPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly()); g.Count != 30 {
		t.Fatalf("%d request records under the audit trail; want 30", g.Count)
	}
}

func TestReleaseRequestErrors(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	if err := mutex.RequestRelease(ctx, cli, "nobody-holds", "why", mutex.WithNamespace("rr2")); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("nobody holds: %v; want ErrNotHeld", err)
	}
	for _, reason := range []string{"", string(make([]byte, mutex.MaxReasonBytes+1)), "\xff"} {
		if err := mutex.RequestRelease(ctx, cli, "x", reason); !errors.Is(err, mutex.ErrInvalid) {
			t.Errorf("reason %q: %v; want ErrInvalid", reason, err)
		}
	}
	if err := mutex.RequestRelease(ctx, cli, "", "why"); !errors.Is(err, mutex.ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
	if g, _ := cli.Get(ctx, "/rr2/", clientv3.WithPrefix(), clientv3.WithCountOnly()); g.Count != 0 {
		t.Fatalf("%d keys written by refused requests", g.Count)
	}
}

// TestReleaseRequestToASetMember reaches the set's one Lock.
func TestReleaseRequestToASetMember(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	s := newSet(t, client(t), []string{"rq-a", "rq-b"})
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch := l.ReleaseRequested()
	if err := mutex.RequestRelease(ctx, client(t), "rq-b", "rebalance", mutex.WithNamespace("set")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r.Key != l.Keys()[1] {
			t.Fatalf("request to %s; want the key of rq-b %s", r.Key, l.Keys()[1])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the set's holder was not told")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
