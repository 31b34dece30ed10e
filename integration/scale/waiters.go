package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
)

// WaitersConfig sizes one waiters run: Waiters contenders queued on one
// name behind a holder, spread over Clients etcd clients, each with its own
// lease (one key per lease and name: a queue of n needs n leases), drained
// Rounds times.
type WaitersConfig struct {
	// Impl is "baton" or "raw" (etcd's concurrency.Mutex).
	Impl    string
	Waiters int
	Clients int
	// Rounds repeats the drain with fresh waiters, for enough handoffs to
	// give a small queue a p99.
	Rounds int
	// TTL of each waiter's lease.
	TTL time.Duration
	// Deadline bounds the run (queueing and every drain).
	Deadline time.Duration
}

// Validate rejects sizes the run cannot take, naming the field and bound.
func (c WaitersConfig) Validate() error {
	var errs []error
	if c.Impl != "baton" && c.Impl != "raw" {
		errs = append(errs, fmt.Errorf("waiters: Impl must be baton or raw, got %q", c.Impl))
	}
	if c.Waiters < 1 {
		errs = append(errs, fmt.Errorf("waiters: Waiters must be at least 1, got %d", c.Waiters))
	}
	if c.Clients < 1 {
		errs = append(errs, fmt.Errorf("waiters: Clients must be at least 1, got %d", c.Clients))
	} else if c.Waiters > 0 && c.Clients > c.Waiters {
		errs = append(errs, fmt.Errorf("waiters: Clients must be at most Waiters (%d), got %d", c.Waiters, c.Clients))
	}
	if c.Rounds < 1 {
		errs = append(errs, fmt.Errorf("waiters: Rounds must be at least 1, got %d", c.Rounds))
	}
	errs = append(errs, checkTTL("waiters", c.TTL))
	errs = append(errs, checkDeadline("waiters", c.Deadline))
	return errors.Join(errs...)
}

// WaitersResult is one waiters run, every round together.
type WaitersResult struct {
	Impl     string `json:"impl"`
	Waiters  int    `json:"waiters"`
	Clients  int    `json:"clients"`
	Rounds   int    `json:"rounds"`
	Handoffs int    `json:"handoffs"`
	// QueueSeconds is how long queueing took (the last round's).
	QueueSeconds float64 `json:"queue_seconds"`
	// DrainSeconds sums the drains: the holder's release to the last
	// waiter's.
	DrainSeconds float64 `json:"drain_seconds"`
	// Handoff times: from a holder's Unlock call to the next holder's Lock
	// returning.
	HandoffP50  time.Duration `json:"handoff_p50"`
	HandoffP99  time.Duration `json:"handoff_p99"`
	HandoffMean time.Duration `json:"handoff_mean"`
	// RequestsPerHandoff counts the requests the clients sent during the
	// drains (lease renewals apart), per handoff; KeepAlivesPerSecond the
	// renewals meanwhile.
	RequestsPerHandoff  float64 `json:"requests_per_handoff"`
	KeepAlivesPerSecond float64 `json:"keepalives_per_second"`
	// EventsPerHandoff is the events the server sent to watchers during the
	// drains per handoff (etcd_debugging_mvcc_events_total);
	// WatchMessagesPerHandoff the watch responses carrying them.
	EventsPerHandoff        float64 `json:"events_per_handoff"`
	WatchMessagesPerHandoff float64 `json:"watch_messages_per_handoff"`
	// ServerRangesPerHandoff and ServerTxnsPerHandoff are the reads and
	// transactions the server applied per handoff.
	ServerRangesPerHandoff float64 `json:"server_ranges_per_handoff"`
	ServerTxnsPerHandoff   float64 `json:"server_txns_per_handoff"`
	// CPUPerHandoff is this process's CPU time (server and clients) per
	// handoff during the drains.
	CPUPerHandoff time.Duration `json:"cpu_per_handoff"`
	// Per queued waiter at the server, the last round's: watchers, keys
	// and db bytes (growth while the queue stood, over Waiters).
	WatchersPerWaiter float64 `json:"watchers_per_waiter"`
	KeysPerWaiter     float64 `json:"keys_per_waiter"`
	DBBytesPerWaiter  float64 `json:"db_bytes_per_waiter"`
	// OutOfOrder counts waiters that held before one queued earlier
	// (the etcd history's order of creations and deletions); DoubleHolders
	// the times two held at once in this process.
	OutOfOrder    int `json:"out_of_order"`
	DoubleHolders int `json:"double_holders"`
	// KeysLeft under the name's prefix after every waiter's Close, and
	// WatchersLeft above the baseline before the run.
	KeysLeft     int     `json:"keys_left"`
	WatchersLeft float64 `json:"watchers_left"`
}

// OK says the queue drained in order, one holder at a time, and left
// nothing behind.
func (r WaitersResult) OK() bool {
	return r.OutOfOrder == 0 && r.DoubleHolders == 0 && r.KeysLeft == 0 && r.WatchersLeft <= 0
}

// Waiters queues cfg.Waiters contenders behind a holder on one name of the
// member at endpoint (which must run in this process: its metrics are
// read), releases the holder and lets the queue drain, each waiter
// unlocking as soon as it holds; then it closes every waiter and checks
// that no key and no watcher is left. The queue forms in parallel; its
// order is etcd's (CreateRevision), checked against the order of the
// deletions in etcd's history.
func Waiters(ctx context.Context, endpoint string, cfg WaitersConfig, progress io.Writer) (WaitersResult, error) {
	if err := cfg.Validate(); err != nil {
		return WaitersResult{}, err
	}
	impl, err := harness.ImplByName(cfg.Impl)
	if err != nil {
		return WaitersResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	counter := harness.NewCounter()
	clis := make([]*clientv3.Client, cfg.Clients)
	defer func() {
		for _, c := range clis {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range clis {
		if clis[i], err = harness.NewClient(endpoint, counter); err != nil {
			return WaitersResult{}, err
		}
	}
	base, err := ReadServer(nil)
	if err != nil {
		return WaitersResult{}, err
	}
	res := WaitersResult{Impl: cfg.Impl, Waiters: cfg.Waiters, Clients: cfg.Clients, Rounds: cfg.Rounds}
	var handoffs []time.Duration
	var requests, keepalives int64
	var drain, cpu time.Duration
	var events ServerStats
	for round := range cfg.Rounds {
		name := fmt.Sprintf("waiters-%s-%d-%d-%d", cfg.Impl, cfg.Waiters, round, time.Now().UnixNano())
		r, err := drainOnce(ctx, clis, counter, impl, name, cfg)
		if err != nil {
			return res, fmt.Errorf("waiters %d (%s), round %d: %w", cfg.Waiters, cfg.Impl, round+1, err)
		}
		handoffs = append(handoffs, r.handoffs...)
		requests += r.requests
		keepalives += r.keepalives
		drain += r.drain
		cpu += r.cpu
		events = ServerStats{Events: events.Events + r.server.Events, WatchMessages: events.WatchMessages + r.server.WatchMessages,
			Ranges: events.Ranges + r.server.Ranges, Txns: events.Txns + r.server.Txns}
		res.QueueSeconds = r.queue.Seconds()
		res.OutOfOrder += r.outOfOrder
		res.DoubleHolders += r.double
		res.KeysLeft += r.keysLeft
		res.WatchersPerWaiter = r.standing.Watchers / float64(cfg.Waiters)
		res.KeysPerWaiter = r.standing.Keys / float64(cfg.Waiters)
		res.DBBytesPerWaiter = r.standing.DBBytes / float64(cfg.Waiters)
		if progress != nil && cfg.Rounds > 1 && (round+1)%max(cfg.Rounds/4, 1) == 0 {
			fmt.Fprintf(progress, "  waiters %d (%s): round %d/%d\n", cfg.Waiters, cfg.Impl, round+1, cfg.Rounds)
		}
	}
	n := float64(len(handoffs))
	res.Handoffs = len(handoffs)
	res.DrainSeconds = drain.Seconds()
	res.HandoffP50, res.HandoffP99, res.HandoffMean = harness.Percentile(handoffs, 50), harness.Percentile(handoffs, 99), harness.Mean(handoffs)
	res.RequestsPerHandoff = float64(requests) / n
	res.KeepAlivesPerSecond = float64(keepalives) / drain.Seconds()
	res.EventsPerHandoff = events.Events / n
	res.WatchMessagesPerHandoff = events.WatchMessages / n
	res.ServerRangesPerHandoff = events.Ranges / n
	res.ServerTxnsPerHandoff = events.Txns / n
	res.CPUPerHandoff = cpu / time.Duration(len(handoffs))
	res.WatchersLeft = watchersBack(ctx, base.Watchers)
	return res, nil
}

// watchersBack waits (up to 5 s) for the server's watcher count to come
// back to base, and returns how many are still above it.
func watchersBack(ctx context.Context, base float64) float64 {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := ReadServer(nil)
		if err != nil {
			return -1
		}
		left := s.Watchers - base
		if left <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type drained struct {
	queue, drain, cpu    time.Duration
	handoffs             []time.Duration
	requests, keepalives int64
	server               ServerStats // growth over the drain
	standing             ServerStats // growth while the queue stood
	outOfOrder, double   int
	keysLeft             int
}

// queueBatch is how many waiters start queueing at once.
const queueBatch = 256

func drainOnce(ctx context.Context, clis []*clientv3.Client, counter *harness.Counter, impl harness.Impl, name string, cfg WaitersConfig) (drained, error) {
	var out drained
	n := cfg.Waiters
	holder, err := impl.NewMutex(clis[0], nil, name, cfg.TTL)
	if err != nil {
		return out, err
	}
	defer holder.Close()
	before, err := ReadServer(nil)
	if err != nil {
		return out, err
	}
	hh, err := holder.Lock(ctx)
	if err != nil {
		return out, err
	}
	prefix := holder.Prefix()
	head, err := clis[0].Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return out, err
	}
	startRev := head.Header.Revision

	mus := make([]harness.Mutex, n)
	defer func() { harness.CloseAll(mus) }()
	type turn struct{ locked, unlocking time.Time }
	var (
		mu      sync.Mutex
		turns   []turn
		holding atomic.Int32
		double  atomic.Int32
		wg      sync.WaitGroup
	)
	errs := make(chan error, n)
	lctx, lcancel := context.WithCancel(ctx)
	defer func() { lcancel(); wg.Wait() }()
	queueStart := time.Now()
	for lo := 0; lo < n; lo += queueBatch {
		hi := min(lo+queueBatch, n)
		for i := lo; i < hi; i++ {
			m, err := impl.NewMutex(clis[i%len(clis)], nil, name, cfg.TTL)
			if err != nil {
				return out, err
			}
			mus[i] = m
			harness.WaitTurn(lctx, &wg, m, errs, func() {
				if holding.Add(1) > 1 {
					double.Add(1)
				}
				t := turn{locked: time.Now()}
				holding.Add(-1)
				t.unlocking = time.Now()
				mu.Lock()
				turns = append(turns, t)
				mu.Unlock()
			})
		}
		if err := waitCount(ctx, clis[0], prefix, int64(hi+1), errs); err != nil {
			return out, fmt.Errorf("queueing %d waiters: %w", hi, err)
		}
	}
	out.queue = time.Since(queueStart)
	standing, err := settled(ctx, before.Watchers+float64(n))
	if err != nil {
		return out, err
	}
	out.standing = standing.Sub(before)

	counter.Reset()
	cpu := cpuTime()
	start := time.Now()
	if err := hh.Unlock(ctx); err != nil {
		return out, err
	}
	wg.Wait()
	out.drain = time.Since(start)
	out.cpu = cpuTime() - cpu
	counts := counter.Snapshot()
	after, err := ReadServer(nil)
	if err != nil {
		return out, err
	}
	out.server = after.Sub(standing)
	if err := harness.JoinErrors(errs); err != nil {
		return out, err
	}
	out.keepalives = counts[harness.MethodKeepAlive]
	for m, c := range counts {
		if m != harness.MethodKeepAlive {
			out.requests += c
		}
	}
	out.double = int(double.Load())
	prev := start
	for _, t := range turns {
		out.handoffs = append(out.handoffs, t.locked.Sub(prev))
		prev = t.unlocking
	}
	if out.outOfOrder, err = outOfOrder(ctx, clis[0], prefix, startRev, n); err != nil {
		return out, err
	}
	harness.CloseAll(mus)
	clear(mus)
	left, err := clis[0].Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return out, err
	}
	out.keysLeft = int(left.Count)
	if out.keysLeft > 0 {
		// The holder's own key goes with its Close below: count only waiters'.
		out.keysLeft = max(out.keysLeft-1, 0)
	}
	return out, nil
}

// settled reads the server once its watcher count reached want (each
// queued waiter watches one key), or stayed put for a second, within 10 s.
func settled(ctx context.Context, want float64) (ServerStats, error) {
	deadline := time.Now().Add(10 * time.Second)
	last, since := -1.0, time.Now()
	for {
		s, err := ReadServer(nil)
		if err != nil || s.Watchers >= want || time.Now().After(deadline) || time.Since(since) > time.Second {
			return s, err
		}
		if s.Watchers != last {
			last, since = s.Watchers, time.Now()
		}
		select {
		case <-ctx.Done():
			return s, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cpuTime is the user and system CPU time this process used so far (the
// embedded member's and the clients' together).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitCount waits until prefix has want keys, or a waiter fails.
func waitCount(ctx context.Context, cli *clientv3.Client, prefix string, want int64, errs <-chan error) error {
	for {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if r.Count >= want {
			return nil
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%d of %d keys queued: %w", r.Count, want, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// outOfOrder replays the prefix's history from rev and counts the waiters
// whose key was deleted (each waiter unlocks as soon as it holds) before a
// key created earlier: a FIFO queue has none.
func outOfOrder(ctx context.Context, cli *clientv3.Client, prefix string, rev int64, n int) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	created := map[string]int64{}
	deletions := 0
	var order []int64
	for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return 0, fmt.Errorf("replaying the queue's history: %w", err)
		}
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			switch {
			case ev.Type == mvccpb.PUT && ev.IsCreate():
				created[k] = ev.Kv.CreateRevision
			case ev.Type == mvccpb.DELETE:
				if cr, ok := created[k]; ok {
					order = append(order, cr)
				}
				deletions++
			}
		}
		if deletions >= n+1 { // the holder's and every waiter's
			break
		}
	}
	if len(order) < n {
		return 0, fmt.Errorf("replaying the queue's history: %d of %d waiters' deletions seen", len(order), n)
	}
	out := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			out++
		}
	}
	return out, nil
}

// WaitersRuns are the runs of the waiters phase: baton at 8 waiters
// (rounds drains: the handoff p99 baseline), 10, 1,000 and n, on clients
// clients (fewer for a queue smaller than that); raw etcd concurrency at
// the same sizes up to rawMax.
func WaitersRuns(n, clients, rounds, rawMax int) []WaitersConfig {
	sizes := []int{8, 10, 1000, n}
	sizes = slices.DeleteFunc(sizes, func(s int) bool { return s > n })
	sizes = slices.Compact(sizes)
	var out []WaitersConfig
	for _, impl := range []string{"baton", "raw"} {
		for _, s := range sizes {
			if impl == "raw" && s > rawMax {
				continue
			}
			r := 1
			if s == 8 {
				r = rounds
			}
			out = append(out, WaitersConfig{Impl: impl, Waiters: s, Clients: min(clients, s), Rounds: r,
				TTL: 120 * time.Second, Deadline: 10 * time.Minute})
		}
	}
	return out
}
