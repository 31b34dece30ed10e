package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// TestLockDelayAfterALostLeaderNotAfterResign: the next leader's Campaign
// returns the delay after the leader's key is force-deleted, at once
// after a Resign.
func TestLockDelayAfterALostLeaderNotAfterResign(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := srv.Client(t)
	const d = 2 * time.Second
	opt := []election.Option{election.WithLockDelay(d), election.WithNamespace("eldelay"), election.WithTTL(5 * time.Second)}
	for _, clean := range []bool{true, false} {
		e1, err := election.New(cli, "sched", opt...)
		if err != nil {
			t.Fatal(err)
		}
		defer e1.Close()
		t1, err := e1.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if clean {
			err = t1.Resign(ctx)
		} else {
			_, err = cli.Delete(ctx, t1.Key())
		}
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e2, err := election.New(srv.Client(t), "sched", opt...)
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		t2, err := e2.Campaign(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if clean && took > time.Second || !clean && took < d {
			t.Fatalf("clean %v: next leader after %v (delay %v)", clean, took, d)
		}
		_ = t2.Resign(context.Background())
	}
}

// TestReleaseRequestReachesTheLeader: a request reaches the Term, not the
// next leader's.
func TestReleaseRequestReachesTheLeader(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := srv.Client(t)
	e, err := election.New(cli, "rr", election.WithNamespace("elrr"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t1, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	ch := t1.ReleaseRequested()
	if err := election.RequestRelease(ctx, srv.Client(t), "rr", "rebalance", election.WithNamespace("elrr")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r.Reason != "rebalance" || r.Token != int64(t1.Token()) {
			t.Fatalf("request %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader was not told")
	}
	if err := t1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	t2, err := e.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-t2.ReleaseRequested():
		t.Fatalf("the next leader saw %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	_ = t2.Resign(ctx)
	if err := election.RequestRelease(ctx, cli, "rr", "x", election.WithNamespace("elrr")); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("nobody leads: %v", err)
	}
}
