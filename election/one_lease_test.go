package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	bsession "github.com/batonhq/baton/session"
)

// etcd's TestElectionSessionRecampaign, ported: a second Campaign through
// the same etcd session takes the key over with its value, and the first
// Term ends before it returns, so there is never more than one leader.
func TestRecampaignThroughOneEtcdSessionLeavesOneLeader(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	e := newElection(t, cli, "recampaign", election.WithSession(cs))
	t1, err := e.Campaign(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	e2 := newElection(t, cli, "recampaign", election.WithSession(cs))
	t2, err := e2.Campaign(ctx, "def")
	if err != nil {
		t.Fatal(err)
	}
	l := <-e.Observe(ctx)
	if l.Value != "def" {
		t.Fatalf("leader %+v, want value def", l)
	}
	if t1.Context().Err() == nil {
		t.Fatalf("two live terms on one key (token %d and %d)", t1.Token(), t2.Token())
	}
	if cause := context.Cause(t1.Context()); !errors.Is(cause, election.ErrLost) {
		t.Fatalf("first term's cause %v, want ErrLost", cause)
	}
	if err := t1.Resign(ctx); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign of the replaced term = %v, want ErrNotLeader", err)
	}
	if t2.Context().Err() != nil {
		t.Fatalf("the replaced term's Resign ended the new one: %v", context.Cause(t2.Context()))
	}
	if l, err := e.Leader(ctx); err != nil || l.Key != t2.Key() {
		t.Fatalf("leader after the old term's Resign: %+v, %v", l, err)
	}
	_ = t2.Resign(ctx)
}

// Run on a session.Wrap session returns once the etcd session under it
// ends, closed or revoked by its owner, instead of retrying for ever.
func TestRunReturnsWhenItsWrappedEtcdSessionEnds(t *testing.T) {
	for _, end := range []string{"close", "revoke"} {
		t.Run(end, func(t *testing.T) {
			cli := client(t)
			ctx := etcdtest.Context(t, 30*time.Second)
			cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			ws, err := bsession.Wrap(cs)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			e := newElection(t, cli, "run-wrapped-"+end, election.WithSession(ws))
			leading := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- e.Run(ctx, "a", func(ctx context.Context, _ *election.Term) error {
					close(leading)
					<-ctx.Done()
					return nil
				})
			}()
			etcdtest.Within(t, leading, 10*time.Second, "leadership")
			if end == "close" {
				_ = cs.Close()
			} else if _, err := cli.Revoke(ctx, cs.Lease()); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, election.ErrSessionClosed) {
					t.Fatalf("Run = %v, want ErrSessionClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run had not returned 10s after its etcd session ended")
			}
		})
	}
}

// The leader gauge of a label shared by two Elections stays 1 while one of
// them still leads.
func TestLeaderGaugeStaysOneWhileATermUnderASharedLabelLeads(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	a := newElection(t, cli, "gauge-shared-a", election.WithRegisterer(reg), election.WithMetricLabel("jobs"))
	b := newElection(t, cli, "gauge-shared-b", election.WithRegisterer(reg), election.WithMetricLabel("jobs"))
	ta, err := a.Campaign(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.Campaign(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = ta.Resign(ctx)
	want := `
# HELP baton_election_is_leader 1 while this process leads the election.
# TYPE baton_election_is_leader gauge
baton_election_is_leader{name="jobs",namespace="baton"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_election_is_leader"); err != nil {
		t.Fatalf("one of two Elections on a label still leads: %v", err)
	}
	_ = a.Close()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_election_is_leader"); err != nil {
		t.Fatalf("after closing the other Election: %v", err)
	}
	_ = tb.Resign(ctx)
}

// A Run whose key another Campaign through the same lease took over
// returns ErrReplaced instead of taking it back: two candidacies on one
// lease do not flap.
func TestRunReplacedByACampaignOnItsLeaseReturns(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	s, err := bsession.New(cli, bsession.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e1 := newElection(t, cli, "run-replaced", election.WithSession(s))
	e2 := newElection(t, cli, "run-replaced", election.WithSession(s))
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e1.Run(ctx, "a", func(ctx context.Context, _ *election.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	etcdtest.Within(t, leading, 10*time.Second, "leadership")
	t2, err := e2.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, election.ErrReplaced) {
			t.Fatalf("Run = %v, want ErrReplaced", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its key was taken over")
	}
	if l, err := e2.Leader(ctx); err != nil || l.Value != "b" || t2.Context().Err() != nil {
		t.Fatalf("leader %+v, %v; term live: %v", l, err, t2.Context().Err() == nil)
	}
	_ = t2.Resign(ctx)
}
