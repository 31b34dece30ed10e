package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/etcdtest"
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
