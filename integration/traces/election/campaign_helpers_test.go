package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/history"
)

type campaignResult struct {
	term *election.Term
	err  error
	at   time.Time
}

// campaignAsync campaigns in a goroutine; the result arrives on the channel.
func campaignAsync(ctx context.Context, e *election.Election, value string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := e.Campaign(ctx, value)
		ch <- campaignResult{term, err, time.Now()}
	}()
	return ch
}

func await(t *testing.T, ch <-chan campaignResult, d time.Duration, what string) *election.Term {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Campaign = %v", what, r.err)
		}
		return r.term
	case <-time.After(d):
		t.Fatalf("%s: Campaign did not return within %v", what, d)
	}
	return nil
}

// waitCandidates waits until the election lists n candidates.
func waitCandidates(t *testing.T, e *election.Election, n int) []election.Candidate {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cands, err := e.Candidates(context.Background())
		if err == nil && len(cands) == n {
			return cands
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates = %+v, %v; want %d", cands, err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leaderHistory is what etcd's own history of an election's prefix shows.
type leaderHistory struct {
	leaders    []history.Event // each new leader key's put, in order
	violations []string        // revisions with more than one key
	gaps       []string        // revisions without a key between two leaders
}
