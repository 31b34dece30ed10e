package chaos_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestCompactionAndDroppedWatches compacts the history and resets the
// watch streams of waiting Lock calls, a waiting candidate and an
// observer, again between every handoff: each waiter still takes the lock
// in its turn, the candidate leads on resignation, and Observe reports
// every leader change and stays open.
func TestCompactionAndDroppedWatches(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 5 * time.Second
	admin := c.Client(t)
	var parts []*cluster.Partition
	proxied := func() *clientv3.Client {
		cli, p := c.Proxied(t)
		parts = append(parts, p)
		return cli
	}
	ctx := ctxTimeout(t, 60*time.Second)
	churn := func() {
		t.Helper()
		for i := range 50 {
			if _, err := admin.Put(ctx, "/chaos/churn", fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := admin.Get(ctx, "/chaos/churn")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			p.DropConnections()
		}
		// More history after the compaction, so that resumed watches start
		// below the compacted revision and the current one both.
		for i := range 10 {
			if _, err := admin.Put(ctx, "/chaos/churn", fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A holder and three waiters, in that order.
	const lockName = "compact-lock"
	prefix := "/baton/v1/lock/" + lockName + "/"
	m0, err := mutex.New(admin, lockName, mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m0.Close() })
	prev, err := m0.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	results := make([]chan lockResult, 3)
	for i := range results {
		m, err := mutex.New(proxied(), lockName, mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		results[i] = make(chan lockResult, 1)
		go func() {
			l, err := m.Lock(ctx)
			results[i] <- lockResult{l, err}
		}()
		etcdtest.WaitKeys(t, admin, prefix, i+2)
	}

	// A leader, a candidate and an observer.
	const electName = "compact-elect"
	eL, err := election.New(admin, electName, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eL.Close() })
	term, err := eL.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	eC, err := election.New(proxied(), electName, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eC.Close() })
	candidate := make(chan termResult, 1)
	go func() {
		t2, err := eC.Campaign(ctx, "second")
		candidate <- termResult{t2, err}
	}()
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/"+electName+"/", 2)
	eO, err := election.New(proxied(), electName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eO.Close() })
	obs := newObserver(eO.Observe(ctx))
	obs.waitFor(t, "first", 10*time.Second)

	var handoffs []time.Duration
	for i := range results {
		churn()
		released := time.Now()
		if err := prev.Unlock(ctx); err != nil {
			t.Fatalf("Unlock before waiter %d: %v", i, err)
		}
		select {
		case r := <-results[i]:
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			handoffs = append(handoffs, time.Since(released))
			prev = r.l
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not acquire within 10 s of its predecessor's release", i)
		}
		for j := i + 1; j < len(results); j++ {
			select {
			case r := <-results[j]:
				t.Fatalf("waiter %d acquired out of turn, before waiter %d released (err %v)", j, i, r.err)
			default:
			}
		}
	}
	if err := prev.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	churn()
	resigned := time.Now()
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var t2 *election.Term
	select {
	case r := <-candidate:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t2 = r.t
	case <-time.After(10 * time.Second):
		t.Fatal("candidate did not lead within 10 s of the resignation")
	}
	took := time.Since(resigned)
	obs.waitFor(t, "second", 10*time.Second)
	seen := time.Since(resigned)
	churn()
	if err := t2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	obs.waitFor(t, "", 10*time.Second)
	if l, err := eO.Leader(ctx); err == nil {
		t.Errorf("Leader after both resigned = %+v, want ErrNoLeader", l)
	}
	figure(t, "handoffs to waiters across compaction and reset watches: %s; candidate led %v after the resignation, observer saw it after %v",
		durations(handoffs), took.Round(time.Millisecond), seen.Round(time.Millisecond))
}

// observer follows an Observe channel.
type observer struct {
	mu     sync.Mutex
	last   election.Leader
	any    bool
	closed bool
	change chan struct{}
}

func newObserver(ch <-chan election.Leader) *observer {
	o := &observer{change: make(chan struct{}, 1)}
	go func() {
		for l := range ch {
			o.mu.Lock()
			o.last, o.any = l, true
			o.mu.Unlock()
			select {
			case o.change <- struct{}{}:
			default:
			}
		}
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
		select {
		case o.change <- struct{}{}:
		default:
		}
	}()
	return o
}

// waitFor waits until the observed leader's value is value ("" for no
// leader); it fails the test if the channel closes or d passes.
func (o *observer) waitFor(t *testing.T, value string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		o.mu.Lock()
		last, any, closed := o.last, o.any, o.closed
		o.mu.Unlock()
		if closed {
			t.Fatal("Observe channel closed")
		}
		if any && last.Value == value && last.IsZero() == (value == "") {
			return
		}
		select {
		case <-o.change:
		case <-timeout:
			t.Fatalf("observer saw %+v, not %q, within %v", last, value, d)
		}
	}
}
