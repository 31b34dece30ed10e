package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

func next(t *testing.T, ch <-chan election.Leader) election.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("Observe channel closed early")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no Observe update within 10s")
	}
	return election.Leader{}
}

func TestObserveSendsEveryChange(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	pcli, proxy := proxied(t)
	watcher := newElection(t, pcli, "observe")
	octx, stop := context.WithCancel(ctx)
	obs := watcher.Observe(octx)

	if l := next(t, obs); !l.IsZero() {
		t.Fatalf("first state = %+v, want no leader", l)
	}
	a := newElection(t, cli, "observe")
	ta, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if l := next(t, obs); l.Key != ta.Key() || l.Value != "a" || l.Token != ta.Token() {
		t.Fatalf("after campaign: %+v", l)
	}
	if err := ta.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if l := next(t, obs); l.Value != "a2" || l.Token != ta.Token() {
		t.Fatalf("after proclaim: %+v", l)
	}
	b := newElection(t, client(t), "observe")
	won := make(chan *election.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- tb
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2)
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := <-won
	if l := next(t, obs); l.Key != tb.Key() || l.Value != "b" {
		t.Fatalf("after resign: %+v", l)
	}

	// Compaction while the observer is cut off: it resumes from a compacted
	// revision, re-reads, and reports the current state.
	proxy.Blackhole()
	if err := tb.Proclaim(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := cli.Put(ctx, "/data/observe-filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Compact(ctx, cli); err != nil {
		t.Fatal(err)
	}
	proxy.DropConnections()
	proxy.Restore()
	if l := next(t, obs); l.Value != "b2" || l.Token != tb.Token() {
		t.Fatalf("after compaction: %+v", l)
	}

	// A dropped watch stream, then the leader's lease expiring.
	proxy.DropConnections()
	if _, err := cli.Revoke(ctx, tb.Lease()); err != nil {
		t.Fatal(err)
	}
	if l := next(t, obs); !l.IsZero() {
		t.Fatalf("after lease expiry: %+v, want no leader", l)
	}
	stop()
	for l := range obs {
		t.Fatalf("update %+v after ctx ended", l)
	}
}
