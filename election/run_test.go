package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
)

type started struct {
	token fencing.Token
	ctx   context.Context
}

func TestRunWorksOnlyWhileLeaderAndCampaignsAgain(t *testing.T) {
	cli := client(t)
	e := newElection(t, client(t), "run-again", election.WithTTL(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts := make(chan started, 4)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, "host-a", func(ctx context.Context, term *election.Term) error {
			starts <- started{term.Token(), ctx}
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	first := <-starts
	l, err := e.Leader(etcdtest.Context(t, 5*time.Second))
	if err != nil || l.Token != first.token {
		t.Fatalf("Leader = %+v, %v while work runs", l, err)
	}
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), l.LeaseID); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, first.ctx.Done(), 5*time.Second, "work's ctx ending after loss")
	if cause := context.Cause(first.ctx); !errors.Is(cause, election.ErrKeyGone) {
		t.Fatalf("work's cause = %v", cause)
	}
	var second started
	select {
	case second = <-starts:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not lead again after losing its lease")
	}
	if second.token <= first.token {
		t.Fatalf("second term token %d after %d", second.token, first.token)
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if got := etcdtest.Keys(t, cli, e.Prefix()); len(got) != 0 {
		t.Fatalf("keys after Run returned = %v (it should resign)", got)
	}
}

func TestRunResignsWhenWorkReturns(t *testing.T) {
	cli := client(t)
	e := newElection(t, cli, "run-returns")
	boom := errors.New("boom")
	err := e.Run(etcdtest.Context(t, 10*time.Second), "v", func(ctx context.Context, term *election.Term) error {
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the work's error", err)
	}
	if got := etcdtest.Keys(t, cli, e.Prefix()); len(got) != 0 {
		t.Fatalf("keys = %v", got)
	}
	if err := e.Run(etcdtest.Context(t, 10*time.Second), "v", func(context.Context, *election.Term) error { return nil }); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if err := e.Run(context.Background(), "v", nil); !errors.Is(err, election.ErrInvalid) {
		t.Fatalf("Run(nil) = %v", err)
	}
}

func TestRunHandsOverOnShutdownWellUnderTheTTL(t *testing.T) {
	cli := client(t)
	ttl := 10 * time.Second
	a := newElection(t, cli, "handover", election.WithTTL(ttl))
	b := newElection(t, client(t), "handover", election.WithTTL(ttl))
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- a.Run(ctx, "a", func(ctx context.Context, _ *election.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	<-leading
	won := make(chan time.Time, 1)
	go func() {
		tb, err := b.Campaign(etcdtest.Context(t, 20*time.Second), "b")
		if err != nil {
			t.Error(err)
			close(won)
			return
		}
		won <- time.Now()
		_ = tb.Resign(context.Background())
	}()
	etcdtest.WaitKeys(t, cli, a.Prefix(), 2)
	start := time.Now()
	cancel()
	at, ok := <-won
	if !ok {
		t.FailNow()
	}
	d := at.Sub(start)
	t.Logf("handover on shutdown (TTL %v): %v", ttl, d)
	if d > ttl/10 {
		t.Fatalf("handover took %v, want well under the TTL %v", d, ttl)
	}
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunComesBackAfterEtcdRecovers(t *testing.T) {
	cli := client(t)
	pcli, proxy := proxied(t)
	e := newElection(t, pcli, "run-recovers", election.WithTTL(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts := make(chan started, 4)
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, "v", func(ctx context.Context, term *election.Term) error {
			starts <- started{term.Token(), ctx}
			<-ctx.Done()
			return nil
		})
	}()
	first := <-starts
	proxy.Blackhole()
	etcdtest.Within(t, first.ctx.Done(), 5*time.Second, "loss while cut off")
	// The server expires the lease: the key goes.
	etcdtest.WaitKeys(t, cli, e.Prefix(), 0)
	proxy.Restore()
	select {
	case second := <-starts:
		if second.token <= first.token {
			t.Fatalf("token %d after %d", second.token, first.token)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not lead again after etcd became reachable")
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}
