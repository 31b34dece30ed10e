package election_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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

func notYet(t *testing.T, ch <-chan campaignResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned: term %v, err %v", what, r.term != nil, r.err)
	default:
	}
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

// readLeaders replays every put and delete under prefix from revision
// from, one revision at a time (a transaction's events together), and
// reports the leaders in order, every revision with two keys, and every
// revision without a key that a later leader ended.
func readLeaders(t *testing.T, cli *clientv3.Client, prefix string, from int64) leaderHistory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The marker Record writes goes beside the prefix, not in it: a key in
	// a Preferred election's prefix would be taken for a candidate.
	all, err := history.Record(ctx, cli, strings.TrimSuffix(prefix, "/"), from)
	if err != nil {
		t.Fatal(err)
	}
	var events []history.Event
	for _, ev := range all {
		if strings.HasPrefix(ev.Key, prefix) {
			events = append(events, ev)
		}
	}
	var h leaderHistory
	live := map[string]int64{}
	var emptySince int64 = -1
	for i := 0; i < len(events); {
		rev := events[i].Rev
		var puts []history.Event
		for ; i < len(events) && events[i].Rev == rev; i++ {
			ev := events[i]
			if ev.Delete {
				delete(live, ev.Key)
				continue
			}
			if _, ok := live[ev.Key]; !ok || live[ev.Key] != ev.Create {
				puts = append(puts, ev)
			}
			live[ev.Key] = ev.Create
		}
		if len(live) > 1 {
			keys := make([]string, 0, len(live))
			for k := range live {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			h.violations = append(h.violations, fmt.Sprintf("rev %d: %d keys %v", rev, len(live), keys))
		}
		for _, p := range puts {
			if emptySince >= 0 {
				h.gaps = append(h.gaps, fmt.Sprintf("revs %d..%d without a leader before %s", emptySince, rev-1, p.Key))
			}
			h.leaders = append(h.leaders, p)
		}
		switch {
		case len(live) == 0 && len(h.leaders) > 0 && emptySince < 0:
			emptySince = rev
		case len(live) > 0:
			emptySince = -1
		}
	}
	return h
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func revNow(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/rev-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
