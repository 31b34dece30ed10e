package election_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// upgrader runs 3 candidates under Run and restarts them one at a time
// with a new version, as a rolling upgrade does.
type upgrader struct {
	t    *testing.T
	cli  *clientv3.Client
	name string

	mu      sync.Mutex
	version [3]string // "" while a candidate is down
	cancel  [3]context.CancelFunc
	done    [3]chan error
	led     []int    // the candidate of each term, in order
	bad     []string // a newer version leading while an older one runs
	gaps    []time.Duration
	lastEnd time.Time
}

func (u *upgrader) start(i int, v string) {
	u.t.Helper()
	e := preferred(u.t, u.cli, u.name, election.WithVersion(v))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	u.mu.Lock()
	u.version[i], u.cancel[i], u.done[i] = v, cancel, done
	u.mu.Unlock()
	id := fmt.Sprintf("c%d@%s", i, v)
	go func() {
		done <- e.Run(ctx, id, func(ctx context.Context, term *election.Term) error {
			u.mu.Lock()
			u.led = append(u.led, i)
			if !u.lastEnd.IsZero() {
				u.gaps = append(u.gaps, time.Since(u.lastEnd))
			}
			for j, other := range u.version {
				if other != "" && other < v {
					u.bad = append(u.bad, fmt.Sprintf("%s leads while c%d runs %s", id, j, other))
				}
			}
			u.mu.Unlock()
			<-ctx.Done()
			u.mu.Lock()
			u.lastEnd = time.Now()
			u.mu.Unlock()
			return nil
		})
	}()
}

// stop ends candidate i's Run: it hands over if it leads.
func (u *upgrader) stop(i int) {
	u.t.Helper()
	u.mu.Lock()
	u.version[i] = ""
	cancel, done := u.cancel[i], u.done[i]
	u.mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		u.t.Fatalf("c%d's Run did not return", i)
	}
}

// terms waits until n terms began (a Run calls its fn only once its
// campaign saw the term, after etcd's record of it), and returns them.
func (u *upgrader) terms(n int) []int {
	u.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u.mu.Lock()
		led := append([]int(nil), u.led...)
		u.mu.Unlock()
		if len(led) >= n {
			return led
		}
		if time.Now().After(deadline) {
			u.t.Fatalf("%d terms began (%v), want %d", len(led), led, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A rolling upgrade v1 → v2 of 3 candidates under Preferred (the oldest
// version leads while versions are mixed): leadership changes at most
// twice, a v2 never leads while a v1 runs, etcd's history never shows two
// leaders nor a revision without one.
func TestRollingUpgradeChangesLeaderAtMostTwice(t *testing.T) {
	for _, order := range []string{"leader last", "leader first"} {
		t.Run(order, func(t *testing.T) {
			cli := client(t)
			u := &upgrader{t: t, cli: cli, name: "upgrade-" + order}
			probe := preferred(t, cli, u.name)
			from := revNow(t, cli)
			for i := range 3 {
				u.start(i, "v1")
				waitCandidates(t, probe, i+1)
			}
			first := u.terms(1)[0]
			var seq []int
			for i := range 3 {
				if i != first {
					seq = append(seq, i)
				}
			}
			if order == "leader last" {
				seq = append(seq, first)
			} else {
				seq = append([]int{first}, seq...)
				seq[1], seq[2] = seq[2], seq[1] // the new leader (the oldest v1 left) last
			}
			for _, i := range seq {
				u.stop(i)
				waitCandidates(t, probe, 2)
				u.start(i, "v2")
				waitCandidates(t, probe, 3)
			}
			end := revNow(t, cli)
			h := readLeaders(t, cli, probe.Prefix(), from)
			u.terms(len(h.leaders))
			u.mu.Lock()
			led, bad, gaps := append([]int(nil), u.led...), u.bad, append([]time.Duration(nil), u.gaps...)
			u.mu.Unlock()
			if changes := len(led) - 1; changes > 2 {
				t.Fatalf("%d leadership changes (%v), want at most 2", changes, led)
			}
			if len(bad) > 0 {
				t.Fatalf("wrong version led: %v", bad)
			}
			if len(h.violations) > 0 || len(h.gaps) > 0 {
				t.Fatalf("etcd's history: two leaders %v; revisions without a leader %v", h.violations, h.gaps)
			}
			if len(h.leaders) != len(led) {
				t.Fatalf("etcd's history shows %d leaders, the candidates %d", len(h.leaders), len(led))
			}
			for _, l := range h.leaders {
				if l.Rev > end {
					t.Fatalf("a leader after the upgrade ended: %+v", l)
				}
			}
			t.Logf("%s: upgrade order %v, leaders %v, %d change(s), hand-over gaps (a term's end to the next one's start) %v",
				order, seq, led, len(led)-1, gaps)
			for i := range 3 {
				u.stop(i)
			}
			if got := etcdtest.Keys(t, cli, probe.Prefix()); len(got) != 0 {
				t.Fatalf("keys left: %v", got)
			}
		})
	}
}
