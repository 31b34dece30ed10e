package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// workload keeps lockers taking one lock and campaigners campaigning in
// one election, each with its own client of every member, and records
// every call.
type workload struct {
	tr     *tracker
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	calls []call
}

type call struct {
	op, who    string
	start, end time.Time
	err        error
}

func startWorkload(t *testing.T, c *cluster.Cluster, tr *tracker, prefix string, lockers, campaigners int, ttl time.Duration) *workload {
	t.Helper()
	w := &workload{tr: tr}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for i := range lockers {
		cli := c.Client(t)
		m, err := mutex.New(cli, prefix+"-lock", mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		who := fmt.Sprintf("locker-%d", i)
		w.wg.Add(1)
		go w.lockLoop(cli, m, who, prefix+"-lock")
	}
	for i := range campaigners {
		cli := c.Client(t)
		e, err := election.New(cli, prefix+"-elect", election.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		who := fmt.Sprintf("campaigner-%d", i)
		w.wg.Add(1)
		go w.campaignLoop(e, who, prefix+"-elect")
	}
	t.Cleanup(w.stop)
	return w
}

// record notes a call; a call cut short by the workload's end is not a
// failure.
func (w *workload) record(op, who string, start time.Time, err error) {
	if err != nil && w.ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	w.calls = append(w.calls, call{op: op, who: who, start: start, end: time.Now(), err: err})
	w.mu.Unlock()
}

func (w *workload) lockLoop(cli *clientv3.Client, m *mutex.Mutex, who, name string) {
	defer w.wg.Done()
	for w.ctx.Err() == nil {
		start := time.Now()
		ctx, cancel := context.WithTimeout(w.ctx, 15*time.Second)
		l, err := m.Lock(ctx)
		cancel()
		w.record("Lock", who, start, err)
		if err != nil {
			w.pause(50 * time.Millisecond)
			continue
		}
		w.tr.acquired(name, who, int64(l.Token()), l.Done())
		start = time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = l.Txn(ctx).Then(clientv3.OpPut("/chaos/"+name, who)).Commit()
		cancel()
		w.record("Lock.Txn", who, start, err)
		w.pause(time.Duration(10+rand.IntN(40)) * time.Millisecond)
		w.release("Unlock", who, l.Unlock)
	}
}

// release calls Unlock or Resign as their contract asks: again after an
// error other than a loss, because a failed release leaves the key, on a
// lease the session keeps renewing, in front of every waiter. Each failed
// attempt is recorded.
func (w *workload) release(op, who string, release func(context.Context) error) {
	for attempt := 0; attempt < 10; attempt++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := release(ctx)
		cancel()
		w.mu.Lock()
		w.calls = append(w.calls, call{op: op, who: who, start: start, end: time.Now(), err: err})
		w.mu.Unlock()
		if err == nil || errors.Is(err, mutex.ErrNotHeld) || errors.Is(err, election.ErrNotLeader) {
			return
		}
	}
}

func (w *workload) campaignLoop(e *election.Election, who, name string) {
	defer w.wg.Done()
	for w.ctx.Err() == nil {
		start := time.Now()
		ctx, cancel := context.WithTimeout(w.ctx, 15*time.Second)
		term, err := e.Campaign(ctx, who)
		cancel()
		w.record("Campaign", who, start, err)
		if err != nil {
			w.pause(50 * time.Millisecond)
			continue
		}
		w.tr.acquired(name, who, int64(term.Token()), term.Done())
		start = time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		err = term.Proclaim(ctx, who+"-leading")
		cancel()
		w.record("Proclaim", who, start, err)
		w.pause(time.Duration(10+rand.IntN(40)) * time.Millisecond)
		w.release("Resign", who, term.Resign)
	}
}

func (w *workload) pause(d time.Duration) {
	select {
	case <-w.ctx.Done():
	case <-time.After(d):
	}
}

// stop ends the workload and waits for it. Idempotent.
func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) history() []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]call(nil), w.calls...)
}

// failures lists the failed calls, except those of the ops given.
func failures(calls []call, since time.Time, except ...string) []string {
	var out []string
	for _, c := range calls {
		if c.err != nil && !slices.Contains(except, c.op) {
			out = append(out, fmt.Sprintf("%s by %s at %+v after the fault (took %v): %v",
				c.op, c.who, c.start.Sub(since).Round(time.Millisecond), c.end.Sub(c.start).Round(time.Millisecond), c.err))
		}
	}
	return out
}

// resumed is the time from the fault until the first successful call of
// op that began after it; zero if none.
func resumed(calls []call, op string, fault time.Time) time.Duration {
	var best time.Time
	for _, c := range calls {
		if c.op == op && c.err == nil && !c.start.Before(fault) && (best.IsZero() || c.end.Before(best)) {
			best = c.end
		}
	}
	if best.IsZero() {
		return 0
	}
	return best.Sub(fault)
}

// longestGap is the longest time between two successive successful
// completions of op that spans the fault.
func longestGap(calls []call, op string, fault time.Time) time.Duration {
	var prev time.Time
	var gap time.Duration
	var ends []time.Time
	for _, c := range calls {
		if c.op == op && c.err == nil {
			ends = append(ends, c.end)
		}
	}
	sortTimes(ends)
	for _, e := range ends {
		if !prev.IsZero() && !prev.After(fault) && e.After(fault) {
			gap = max(gap, e.Sub(prev))
		}
		prev = e
	}
	return gap
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// count is the number of successful calls of op.
func count(calls []call, op string) int {
	n := 0
	for _, c := range calls {
		if c.op == op && c.err == nil {
			n++
		}
	}
	return n
}

// losses lists the calls that failed because ownership was lost.
func losses(calls []call) []string {
	var out []string
	for _, c := range calls {
		if c.err != nil && (errors.Is(c.err, mutex.ErrLost) || errors.Is(c.err, mutex.ErrNotHeld) || errors.Is(c.err, election.ErrNotLeader)) {
			out = append(out, c.op+" by "+c.who+": "+c.err.Error())
		}
	}
	return out
}

func joinLines(s []string) string { return strings.Join(s, "\n") }
