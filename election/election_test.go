package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
)

func newElection(t *testing.T, cli *clientv3.Client, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(cli, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestCampaignLeaderCandidatesProclaimResign(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	a := newElection(t, cli, "sched", election.WithTTL(6*time.Second))
	b := newElection(t, client(t), "sched")
	if _, err := a.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader with no candidate = %v, want ErrNoLeader", err)
	}
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *election.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx, "host-b")
		if err != nil {
			t.Error(err)
		}
		won <- tb
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2)

	l, err := b.Leader(ctx)
	if err != nil || l.Key != ta.Key() || l.Value != "host-a" || l.Token != ta.Token() || l.LeaseID != ta.Lease() {
		t.Fatalf("Leader = %+v, %v; want host-a's term", l, err)
	}
	cands, err := a.Candidates(ctx)
	if err != nil || len(cands) != 2 || cands[0].Value != "host-a" || cands[1].Value != "host-b" {
		t.Fatalf("Candidates = %+v, %v", cands, err)
	}
	if cands[0].TTL <= 0 || cands[0].TTL > 6*time.Second || cands[1].Token <= cands[0].Token {
		t.Fatalf("Candidates = %+v", cands)
	}

	if err := ta.Proclaim(ctx, "host-a:v2"); err != nil {
		t.Fatal(err)
	}
	if ta.Value() != "host-a:v2" {
		t.Fatalf("Value after Proclaim = %q", ta.Value())
	}
	l, _ = b.Leader(ctx)
	if l.Value != "host-a:v2" || l.Token != ta.Token() {
		t.Fatalf("Leader after Proclaim = %+v, want same token, new value", l)
	}

	start := time.Now()
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := <-won
	t.Logf("graceful handover: %v", time.Since(start))
	if tb == nil || tb.Token() <= ta.Token() {
		t.Fatalf("next term %v", tb)
	}
	if cause := context.Cause(ta.Context()); !errors.Is(cause, election.ErrReleased) {
		t.Fatalf("cause after Resign = %v", cause)
	}
	if err := ta.Proclaim(ctx, "late"); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Proclaim after Resign = %v, want ErrNotLeader", err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("second Resign = %v, want nil", err)
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTermTxnAndLossCauses(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	e := newElection(t, cli, "txn")
	term, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := term.Txn(ctx).Then(clientv3.OpPut("/data/election-txn", "1")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, term.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, term.Done(), 5*time.Second, "loss after revoke")
	cause := context.Cause(term.Context())
	if !errors.Is(cause, election.ErrLost) || !errors.Is(cause, election.ErrKeyGone) {
		t.Fatalf("cause = %v, want ErrLost and ErrKeyGone", cause)
	}
	if _, err := term.Txn(ctx).Then(clientv3.OpPut("/data/election-txn", "stale")).Commit(); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Txn after loss = %v, want ErrNotLeader", err)
	}
	if err := term.Resign(ctx); !errors.Is(err, election.ErrNotLeader) || !errors.Is(err, election.ErrLeaseExpired) {
		t.Fatalf("Resign after loss = %v, want ErrNotLeader and the reason told apart, ErrLeaseExpired", err)
	}
	// The Election replaces its lease on the next Campaign.
	again, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if again.Lease() == term.Lease() || again.Token() <= term.Token() {
		t.Fatalf("new term lease %x token %d after %x %d", again.Lease(), again.Token(), term.Lease(), term.Token())
	}
	_ = again.Resign(ctx)
}

func TestCampaignReturnsPromptlyAndLeavesNoKey(t *testing.T) {
	cli := client(t)
	a := newElection(t, cli, "prompt")
	ta, err := a.Campaign(etcdtest.Context(t, 10*time.Second), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer ta.Resign(context.Background())
	pcli, proxy := proxied(t)
	b := newElection(t, pcli, "prompt")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Campaign(ctx, "b")
		errc <- err
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2)
	proxy.Blackhole()
	cancel()
	start := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("Campaign returned %v after ctx ended, want within 100ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Campaign did not return while etcd was unreachable")
	}
	proxy.Restore()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 1)
}

func TestCampaignNeverWinsWithoutItsKey(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	a := newElection(t, cli, "no-key")
	ta, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b := newElection(t, client(t), "no-key")
	errc := make(chan error, 1)
	go func() {
		tb, err := b.Campaign(ctx, "b")
		if err == nil {
			_ = tb.Resign(ctx)
		}
		errc <- err
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2)
	cands, _ := a.Candidates(ctx)
	// Delete the waiter's key, then make it the head of the queue.
	if _, err := cli.Delete(ctx, cands[1].Key); err != nil {
		t.Fatal(err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, election.ErrLost) || !errors.Is(err, election.ErrKeyDeleted) {
			t.Fatalf("Campaign whose key was deleted = %v, want ErrLost and ErrKeyDeleted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Campaign whose key was deleted never returned")
	}
	if got := etcdtest.Keys(t, cli, a.Prefix()); len(got) != 0 {
		t.Fatalf("keys = %v", got)
	}
}

func TestCloseResignsAndRefuses(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	e, err := election.New(cli, "close")
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(context.Background())
	<-obs
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(term.Context()); !errors.Is(cause, election.ErrReleased) {
		t.Fatalf("cause after Close = %v", cause)
	}
	if _, err := e.Campaign(ctx, "v"); !errors.Is(err, election.ErrClosed) {
		t.Fatalf("Campaign after Close = %v", err)
	}
	for range obs {
	}
	if err := e.Run(ctx, "v", func(context.Context, *election.Term) error { return nil }); !errors.Is(err, election.ErrClosed) {
		t.Fatalf("Run after Close = %v", err)
	}
	if got := etcdtest.Keys(t, cli, e.Prefix()); len(got) != 0 {
		t.Fatalf("keys after Close = %v", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTokensIncreaseAcrossLeaders(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	var last fencing.Token
	for i := range 4 {
		e := newElection(t, client(t), "tokens")
		term, err := e.Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		resp, _ := cli.Get(ctx, term.Key())
		if fencing.Token(resp.Kvs[0].CreateRevision) != term.Token() || term.Token() <= last {
			t.Fatalf("term %d token %d, key CreateRevision %d, previous %d", i, term.Token(), resp.Kvs[0].CreateRevision, last)
		}
		last = term.Token()
		_ = term.Resign(ctx)
	}
}
