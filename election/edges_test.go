package election_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/keys"
)

// etcd refuses a value over its request limit as an invalid request: a
// permanent error that Campaign and Run return at once, that leaves no key
// and no reservation behind, so the next Campaign works.
func TestPermanentErrorIsReturnedAndWedgesNothing(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	e := newElection(t, cli, "edge-permanent")
	huge := strings.Repeat("x", 1600*1024) // over etcd's 1.5 MiB request limit
	start := time.Now()
	if _, err := e.Campaign(ctx, huge); err == nil {
		t.Fatal("Campaign with an oversized value succeeded")
	}
	runErr := e.Run(ctx, huge, func(context.Context, *election.Term) error { return nil })
	if runErr == nil {
		t.Fatal("Run with an oversized value returned nil")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Campaign and Run took %v to return etcd's refusal (retried it?)", d)
	}
	if got := etcdtest.Keys(t, cli, e.Prefix()); len(got) != 0 {
		t.Fatalf("refused campaign left keys %v", got)
	}
	term, err := e.Campaign(etcdtest.Context(t, 2*time.Second), "small")
	if err != nil {
		t.Fatalf("Campaign after a refused one: %v", err)
	}
	_ = term.Resign(ctx)
}

// States sent by Observe are strictly increasing in revision, through fast
// handovers among three candidates and a compaction.
func TestObserveNeverGoesBackInTime(t *testing.T) {
	cli := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watcher := newElection(t, client(t), "edge-monotonic")
	ch := watcher.Observe(ctx)
	var seen []election.Leader
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range ch {
			seen = append(seen, l)
		}
	}()
	var es []*election.Election
	for range 3 {
		es = append(es, newElection(t, client(t), "edge-monotonic"))
	}
	for round := range 10 {
		var terms []*election.Term
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, e := range es {
			wg.Add(1)
			go func() {
				defer wg.Done()
				term, err := e.Campaign(ctx, string(rune('a'+i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				terms = append(terms, term)
				mu.Unlock()
				_ = term.Resign(ctx) // hands over at once
			}()
		}
		wg.Wait()
		if round == 5 {
			resp, err := cli.Get(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the last states reach the observer
	cancel()
	<-done
	if len(seen) < 10 {
		t.Fatalf("only %d states observed", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Revision <= seen[i-1].Revision {
			t.Fatalf("state %d (%+v) not after state %d (%+v)", i, seen[i], i-1, seen[i-1])
		}
	}
}

// The leader gauge is 0 after a term that ended before Campaign returned.
func TestLeaderGaugeIsZeroAfterATermLostAtOnce(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	prefix := keys.Prefix("baton", keys.Election, "edge-gauge")
	hooks := &core.Hooks{AfterConfirm: func(key string) {
		if strings.HasPrefix(key, prefix) {
			if _, err := cli.Delete(context.Background(), key); err != nil {
				t.Error(err)
			}
		}
	}}
	e := newElection(t, cli, "edge-gauge", election.WithRegisterer(reg), config.Hooks(hooks))
	term, err := e.Campaign(ctx, "v")
	if err == nil {
		etcdtest.Within(t, term.Done(), 5*time.Second, "the term's end")
		_ = term.Resign(ctx) // returns once the end is recorded
	}
	if v := gaugeValue(t, reg, "baton_election_is_leader"); v != 0 {
		t.Fatalf("is_leader = %v after the term ended", v)
	}
}

// A new Election on a lease that already has this name's candidate key
// (a restarted process reusing its lease) adopts it and proclaims its own
// value, as etcd's Campaign does.
func TestCampaignOnAnExistingKeyProclaimsTheNewValue(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	e := newElection(t, cli, "edge-adopt", election.WithSession(cs))
	key := keys.LeaseKey(e.Prefix(), int64(cs.Lease()))
	if _, err := cli.Put(ctx, key, "abc", clientv3.WithLease(cs.Lease())); err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "def")
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if term.Value() != "def" || l.Value != "def" || l.Key != term.Key() {
		t.Fatalf("term value %q, leader %+v; want both def", term.Value(), l)
	}
}

// Held never returns nil entries, also while terms resign.
func TestHeldHasNoNilEntries(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	e := newElection(t, cli, "edge-held-a")
	others := make([]*election.Election, 4)
	for i := range others {
		others[i] = newElection(t, cli, "edge-held-"+string(rune('b'+i)))
	}
	for range 20 {
		var terms []*election.Term
		for _, o := range append([]*election.Election{e}, others...) {
			term, err := o.Campaign(ctx, "v")
			if err != nil {
				t.Fatal(err)
			}
			terms = append(terms, term)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				for _, h := range e.Held() {
					if h == nil {
						t.Error("nil entry in Held")
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		for _, term := range terms {
			_ = term.Resign(ctx)
		}
		close(stop)
		wg.Wait()
	}
}

// Close deletes the Election's series; WithMetricLabel groups names under
// one label value.
func TestMetricSeriesAreBounded(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	for i := range 3 {
		e, err := election.New(cli, "edge-series-"+string(rune('a'+i)), election.WithRegisterer(reg), election.WithMetricLabel("tenant"))
		if err != nil {
			t.Fatal(err)
		}
		term, err := e.Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		if n := testutil.CollectAndCount(reg, "baton_election_is_leader"); n != 1 {
			t.Fatalf("%d is_leader series with one label for every name", n)
		}
		_ = term.Resign(ctx)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if n := testutil.CollectAndCount(reg); n != 0 {
			t.Fatalf("%d series left after Close", n)
		}
	}
}
