package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

type ledTerm struct {
	term *election.Term
	ctx  context.Context
	at   time.Time
}

// runAsync runs e.Run in a goroutine; each term's start arrives on the
// channel; fn decides what the work does.
func runAsync(ctx context.Context, e *election.Election, value string, work func(ctx context.Context, t *election.Term) error) (<-chan ledTerm, <-chan error) {
	terms := make(chan ledTerm, 16)
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, value, func(ctx context.Context, t *election.Term) error {
			terms <- ledTerm{t, ctx, time.Now()}
			return work(ctx, t)
		})
	}()
	return terms, done
}

func awaitTerm(t *testing.T, ch <-chan ledTerm, what string) ledTerm {
	t.Helper()
	select {
	case l := <-ch:
		return l
	case <-time.After(15 * time.Second):
		t.Fatalf("%s never led", what)
	}
	return ledTerm{}
}

// A better candidate joins; the leader, running under Run, is asked to
// end its term, returns from its work, and Run hands over to it at once,
// then campaigns again: A leads, follows, and leads again.
func TestPreemptionLeaderHandsOverWithinItsDeadline(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	const name = "preempt-graceful"
	a := preferred(t, cli, name, election.WithPriority(0))
	b := preferred(t, cli, name, election.WithPriority(5), election.WithHandoverDeadline(10*time.Second))
	from := revNow(t, cli)
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	asked := make(chan time.Time, 4)
	aterms, adone := runAsync(actx, a, "A", func(ctx context.Context, term *election.Term) error {
		select {
		case <-term.EndRequested():
			asked <- time.Now()
			return nil // done: hand over
		case <-ctx.Done():
			return nil
		}
	})
	first := awaitTerm(t, aterms, "A")
	joined := time.Now()
	bres := campaignAsync(ctx, b, "B")
	var askedAt time.Time
	select {
	case askedAt = <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("A was never asked to end its term")
	}
	tb := await(t, bres, 10*time.Second, "B")
	if cause := context.Cause(first.term.Context()); !errors.Is(cause, election.ErrReleased) {
		t.Fatalf("A's term ended with %v, want ErrReleased (a hand-over)", cause)
	}
	r, _ := first.term.EndRequest()
	t.Logf("graceful preemption: join to EndRequested %v, EndRequested to the new leader %v (deadline 10s); request %+v",
		askedAt.Sub(joined), time.Since(askedAt), r)
	if tb.Token() <= first.term.Token() {
		t.Fatalf("B's token %d after A's %d", tb.Token(), first.term.Token())
	}
	// A campaigns again under Run and leads once B resigns.
	waitCandidates(t, a, 2)
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := awaitTerm(t, aterms, "A again")
	if second.term.Token() <= tb.Token() {
		t.Fatalf("A's second token %d after B's %d", second.term.Token(), tb.Token())
	}
	acancel()
	if err := <-adone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	h := readLeaders(t, cli, a.Prefix(), from)
	if len(h.violations) > 0 || len(h.gaps) > 0 {
		t.Fatalf("history: two leaders %v, gaps %v", h.violations, h.gaps)
	}
	if len(h.leaders) != 3 {
		t.Fatalf("leaders = %d, want 3 (A, B, A)", len(h.leaders))
	}
}

// The leader ignores the request: at the deadline the better candidate
// deletes its key (the leader's Context ends), then takes in a
// transaction of its own. A, under Run, campaigns again.
func TestPreemptionAtTheDeadline(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	const name = "preempt-deadline"
	const deadline = time.Second
	a := preferred(t, cli, name)
	b := preferred(t, cli, name, election.WithPriority(1), election.WithHandoverDeadline(deadline))
	preemptAt := make(chan time.Time, 1)
	election.SetPreemptHook(b, func() { preemptAt <- time.Now() })
	from := revNow(t, cli)
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aterms, adone := runAsync(actx, a, "A", func(ctx context.Context, term *election.Term) error {
		<-ctx.Done() // ignores EndRequested
		return nil
	})
	first := awaitTerm(t, aterms, "A")
	joined := time.Now()
	bres := campaignAsync(ctx, b, "B")
	etcdtest.Within(t, first.term.EndRequested(), 10*time.Second, "A being asked")
	askedAt := time.Now()
	etcdtest.Within(t, first.ctx.Done(), 10*time.Second, "A's preemption")
	endedAt := time.Now()
	tb := await(t, bres, 10*time.Second, "B")
	var pre time.Time
	select {
	case pre = <-preemptAt:
	default:
		t.Fatal("B led without preempting")
	}
	if cause := context.Cause(first.ctx); !errors.Is(cause, election.ErrLost) {
		t.Fatalf("A's cause = %v, want ErrLost", cause)
	}
	if pre.Sub(joined) < deadline {
		t.Fatalf("preempted %v after joining, before the deadline %v", pre.Sub(joined), deadline)
	}
	t.Logf("preemption at the deadline (%v): join to EndRequested %v, EndRequested to A's Context ending %v, A's end to B leading %v",
		deadline, askedAt.Sub(joined), endedAt.Sub(askedAt), time.Since(endedAt))
	waitCandidates(t, a, 2) // A campaigns again
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	awaitTerm(t, aterms, "A again")
	acancel()
	<-adone
	h := readLeaders(t, cli, a.Prefix(), from)
	if len(h.violations) > 0 {
		t.Fatalf("two leaders: %v", h.violations)
	}
	if len(h.leaders) != 3 {
		t.Fatalf("leaders = %d, want 3 (A, B, A)", len(h.leaders))
	}
}

func TestIsLeaderAndStoppedLeading(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	for _, s := range []election.Strategy{election.Oldest, election.Preferred} {
		e := newElection(t, cli, "stopped-"+s.String(), election.WithStrategy(s))
		stopped := make(chan error, 4)
		remove := e.OnStoppedLeading(func(term *election.Term) { stopped <- context.Cause(term.Context()) })
		if e.IsLeader() {
			t.Fatal("IsLeader before Campaign")
		}
		term, err := e.Campaign(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if !e.IsLeader() || !term.IsLeader() {
			t.Fatal("IsLeader false while leading")
		}
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if e.IsLeader() || term.IsLeader() {
			t.Fatal("IsLeader true after Resign")
		}
		select {
		case cause := <-stopped:
			if !errors.Is(cause, election.ErrReleased) {
				t.Fatalf("%s: stopped with %v", s, cause)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: OnStoppedLeading never called", s)
		}
		remove()
		term, err = e.Campaign(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		_ = term.Resign(ctx)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-stopped:
			t.Fatalf("%s: removed callback called: %v", s, cause)
		default:
		}
	}
}
