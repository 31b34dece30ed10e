package election_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// A leader's release or hand-over whose first attempt applied with its
// reply lost is retried, and the retry finds the leader's key gone: its
// own write deleted it, so the answer is success, not ErrNotLeader.

// awaitDeleted returns once key is deleted at a revision after rev.
func awaitDeleted(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, rev int64) {
	t.Helper()
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(rev+1)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return
			}
		}
	}
	t.Fatalf("%s: no deletion seen: %v", key, ctx.Err())
}

func TestResignWhoseReleaseAppliedUnheardIsNoError(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	pcli, p := proxied(t)
	a := newElection(t, pcli, "unheard-resign", election.WithTTL(10*time.Second))
	ta, err := a.Campaign(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	rev := revNow(t, cli)
	p.LoseReplies() // the release applies; its reply never comes
	done := make(chan error, 1)
	go func() { done <- ta.Resign(ctx) }()
	awaitDeleted(t, ctx, cli, ta.Key(), rev)
	p.Sever(0, 0) // the call fails unanswered: retried on a new connection, it finds the key gone
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Resign = %v, want nil: its own first attempt deleted the key", err)
		}
	case <-ctx.Done():
		t.Fatal("Resign did not return")
	}
}

// The successor resigns before the retry reads the election: the
// hand-over's result is gone from etcd, but the leader's key went by it.
func TestTransferWhoseHandOverAppliedUnheardIsNoError(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "unheard-transfer"
	cli := client(t)
	pcli, p := proxied(t)
	a, b := preferred(t, pcli, name), preferred(t, cli, name)
	election.SetHandOverHook(a, func(string) { p.LoseReplies() }) // after the read, before the transaction
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	var to string
	for _, c := range waitCandidates(t, a, 2) {
		if c.Value == "B" {
			to = c.Key
		}
	}
	done := make(chan error, 1)
	go func() { done <- ta.Transfer(ctx, to) }()
	tb := await(t, bres, 10*time.Second, "B")
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	p.Sever(0, 0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Transfer = %v, want nil: its own first attempt handed over", err)
		}
	case <-ctx.Done():
		t.Fatal("Transfer did not return")
	}
}
