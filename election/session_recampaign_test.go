package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/etcdtest"
)

// TestElectionSessionRecampaign is etcd's test of that name
// (tests/integration/v3_election_test.go) adapted to baton: two Elections
// of one name campaign through one etcd session with values "abc" and
// "def". In etcd the second Campaign returns at once and overwrites the
// first's value: both believe they lead, on one key with one token. In
// baton the same name through one lease excludes, so the second waits
// while the first leads, and leads with "def" (a higher token) once the
// first resigns; Observe then reports "def".
func TestElectionSessionRecampaign(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	e := newElection(t, cli, "test-elect", election.WithSession(cs))
	first, err := e.Campaign(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	e2 := newElection(t, cli, "test-elect", election.WithSession(cs))
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	second, err := e2.Campaign(cctx, "def")
	cancel()
	if err == nil {
		_ = second.Resign(ctx)
		t.Fatalf("second Campaign through the same etcd session returned while the first leads: both lead on key %s, tokens %d and %d",
			first.Key(), first.Token(), second.Token())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Campaign while the first leads = %v, want it to wait until its ctx ends (DeadlineExceeded)", err)
	}
	select {
	case <-first.Done():
		t.Fatalf("the first term ended after the second Campaign gave up: %v", context.Cause(first.Context()))
	default:
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "abc" || l.Token != first.Token() {
		t.Fatalf("Leader = %+v, %v; want the first term, value %q, token %d", l, err, "abc", first.Token())
	}

	got := make(chan error, 1)
	go func() {
		var err error
		second, err = e2.Campaign(ctx, "def")
		got <- err
	}()
	select {
	case err := <-got:
		if err == nil {
			_ = second.Resign(ctx)
		}
		t.Fatalf("second Campaign returned (%v) while the first still leads", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("second Campaign after the first resigned: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second Campaign did not lead within 10s of the first's resignation")
	}
	defer second.Resign(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("second term's token %d not above the first's %d", second.Token(), first.Token())
	}

	octx, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case l, ok := <-e.Observe(octx):
		if !ok || l.Value != "def" || l.Token != second.Token() {
			t.Fatalf("Observe's first state = %+v (open %v); want value %q, token %d", l, ok, "def", second.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Observe state within 10s")
	}
}
