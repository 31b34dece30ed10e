package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// stormHolder is the holder process ("<Binary> child storm ..."): it takes
// the locks, prints a stormReady line, and from then on takes every lost
// lock again through its session's gate; once the parent has written
// "restored" on stdin and every lock is held, it closes its sessions and
// writes its report.
func stormHolder(ctx context.Context, args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	fs := flag.NewFlagSet("child storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL (the proxy)")
	nLocks := fs.Int("locks", 0, "locks to hold")
	nSessions := fs.Int("sessions", 0, "sessions")
	ttl := fs.Duration("ttl", 6*time.Second, "lease TTL")
	rate := fs.Float64("rate", 0, "re-acquisitions per second (0: -fraction of the measured rate)")
	fraction := fs.Float64("fraction", 0, "share of the measured rate (0: 1/8)")
	budget := fs.Duration("budget", 0, "least rate: -locks per budget (0: none)")
	attemptTimeout := fs.Duration("attempt-timeout", 2*time.Second, "bound of one Lock attempt")
	deadline := fs.Duration("deadline", 0, "bound of the recovery (0: 3 × locks/rate + 30s)")
	floor := fs.Duration("floor", 0, "how long raw etcd concurrency takes locks at the same rate after the recovery (0: none)")
	reportPath := fs.String("report", "", "file to write the report to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *endpoint == "" || *reportPath == "" || *nLocks < 1 || *nSessions < 1 || *nSessions > *nLocks {
		fmt.Fprintln(stderr, "child storm: -endpoint, -report, -locks and -sessions (at most -locks) are required")
		return 2
	}
	if *fraction == 0 {
		*fraction = stormDefaultFraction
	}
	rep, err := stormHold(ctx, *endpoint, *nLocks, *nSessions, *ttl, *rate, *fraction, *budget, *attemptTimeout, *deadline, *floor, stdout, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "child storm: %v\n", err)
		return 1
	}
	b, err := json.Marshal(rep)
	if err == nil {
		err = os.WriteFile(*reportPath, b, 0o600)
	}
	if err != nil {
		fmt.Fprintf(stderr, "child storm: report: %v\n", err)
		return 1
	}
	return 0
}

type stormLock struct {
	m     *mutex.Mutex
	sess  int
	first *mutex.Lock
	cur   atomic.Pointer[mutex.Lock] // the hold the scanner watches; nil while lost

	mu     sync.Mutex
	loss   stormLoss
	reheld bool
}

func stormHold(ctx context.Context, endpoint string, nLocks, nSessions int, ttl time.Duration, rate, fraction float64,
	budget, attemptTimeout, deadline, floor time.Duration, stdout io.Writer, stdin io.Reader) (*stormReport, error) {
	margin := ttl / 5
	counter := harness.NewCounter()
	sessions := make([]*session.Session, nSessions)
	clients := make([]*clientv3.Client, nSessions)
	locks := make([]*stormLock, nLocks)
	defer func() {
		// The sessions' Close revokes their leases (every key at once);
		// the Mutexes then have nothing left to release.
		for i := range sessions {
			if sessions[i] != nil {
				_ = sessions[i].Close()
			}
		}
		stormEach(len(locks), stormWorkers*nSessions, func(i int) {
			if locks[i] != nil {
				_ = locks[i].m.Close()
			}
		})
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range sessions {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: counter.DialOptions(),
		})
		if err != nil {
			return nil, err
		}
		clients[i] = cli
		s, err := session.New(cli, session.WithTTL(ttl), session.WithSafetyMargin(margin))
		if err != nil {
			return nil, err
		}
		sessions[i] = s
	}

	// Take every lock, unthrottled: stormWorkers Lock calls at once per
	// session.
	start := time.Now()
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for si := range sessions {
		for w := range stormWorkers {
			wg.Go(func() {
				for i := si + w*nSessions; i < nLocks; i += stormWorkers * nSessions {
					if first.Load() != nil {
						return
					}
					m, err := mutex.New(clients[si], fmt.Sprintf("storm-%d", i), mutex.WithNamespace(stormNamespace), mutex.WithSession(sessions[si]))
					if err == nil {
						var l *mutex.Lock
						lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						l, err = m.Lock(lctx)
						cancel()
						if err == nil {
							locks[i] = &stormLock{m: m, sess: si, first: l, loss: stormLoss{Key: l.Key()}}
							continue
						}
						_ = m.Close()
					}
					err = fmt.Errorf("taking lock %d: %w", i, err)
					first.CompareAndSwap(nil, &err)
					return
				}
			})
		}
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return nil, *e
	}
	acq := time.Since(start)
	ready := stormReady{AcquireSeconds: acq.Seconds(), AcquirePerSecond: float64(nLocks) / acq.Seconds(),
		RequestsPerAcquire: float64(harness.RequestsExcept(counter.Snapshot(), harness.MethodWatch)) / float64(nLocks), Rate: rate}
	if ready.Rate == 0 {
		ready.Rate = ready.AcquirePerSecond * ready.RequestsPerAcquire * fraction
		if budget > 0 {
			ready.Rate = max(ready.Rate, float64(nLocks)/budget.Seconds())
		}
	}
	if deadline == 0 {
		deadline = time.Duration(3*float64(nLocks)/ready.Rate*float64(time.Second)) + 30*time.Second
	}
	ready.Deadline = int64(deadline)
	perSession := ready.Rate / float64(nSessions)
	gates := make([]*stormGate, nSessions)
	for i := range gates {
		gates[i] = newStormGate(time.Duration(float64(time.Second) / perSession))
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopRun()

	// Requests sent, locks held and scheduling lag, in 100 ms windows.
	var lagMax atomic.Int64
	var held atomic.Int64
	held.Store(int64(nLocks))
	var (
		winMu   sync.Mutex
		windows []stormWindow
	)
	bg.Go(func() {
		last, lastEv := totalRequests(counter), counter.Events()
		stormEvery(runCtx, 100*time.Millisecond, func(now time.Time) {
			n, ev := totalRequests(counter), counter.Events()
			winMu.Lock()
			windows = append(windows, stormWindow{now.UnixNano(), n - last, held.Load(), time.Duration(lagMax.Swap(0)), ev - lastEv})
			winMu.Unlock()
			last, lastEv = n, ev
		})
	})

	// Every hold: when its Context ends, note when, and how far that was
	// from its lease's earliest expiry, and queue the lock for its
	// session's re-acquirers; a hold taken again and lost again (etcd too
	// slow to renew it in time) is taken again too.
	rep := &stormReport{RelostCauses: map[string]int{}, RelostSlackMin: 1 << 62}
	var (
		attempts atomic.Int64
		failed   atomic.Int64
		allHeld  atomic.Int64
		full     = make(chan struct{}, 1)
		repMu    sync.Mutex
	)
	report := func(f func()) {
		repMu.Lock()
		f()
		repMu.Unlock()
	}
	queues := make([]chan *stormLock, nSessions)
	for i := range queues {
		queues[i] = make(chan *stormLock, nLocks/nSessions+1)
	}
	lose := func(sl *stormLock) {
		held.Add(-1)
		gates[sl.sess].fail()
		queues[sl.sess] <- sl
	}
	// One scanner, not a goroutine per hold, notes every hold's end: its
	// timestamp is late by at most the scan period plus one scan (both
	// reported), where 100,000 AfterFunc goroutines started at once would
	// each be late by their own scheduling.
	for _, sl := range locks {
		sl.cur.Store(sl.first)
	}
	ended := func(sl *stormLock, l *mutex.Lock, now time.Time) {
		expiry := l.Deadline().Add(margin)
		cause := fmt.Sprint(context.Cause(l.Context()))
		if l == sl.first {
			sl.mu.Lock()
			sl.loss.Lost, sl.loss.Expiry, sl.loss.Cause = now.UnixNano(), expiry.UnixNano(), cause
			sl.mu.Unlock()
		} else {
			report(func() {
				rep.Relost++
				rep.RelostCauses[cause]++
				rep.RelostSlackMin = min(rep.RelostSlackMin, expiry.Sub(now))
				if !now.Before(expiry) && len(rep.Errors) < 20 {
					rep.Errors = append(rep.Errors, fmt.Sprintf("%s: a later hold's Context ended %v after renewal+TTL", sl.m.Name(), now.Sub(expiry)))
				}
			})
		}
		lose(sl)
	}
	bg.Go(func() {
		stormEvery(runCtx, stormScanPeriod, func(start time.Time) {
			for _, sl := range locks {
				l := sl.cur.Load()
				if l == nil {
					continue
				}
				select {
				case <-l.Done():
					sl.cur.Store(nil)
					ended(sl, l, time.Now())
				default:
				}
			}
			report(func() { rep.ScanMax = max(rep.ScanMax, time.Since(start)) })
		})
	})
	// Scheduling lag of this process: how late a 5 ms sleep wakes.
	bg.Go(func() {
		for runCtx.Err() == nil {
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			if lag := int64(time.Since(t0) - 5*time.Millisecond); lag > lagMax.Load() {
				lagMax.Store(lag)
			}
		}
	})
	reacquire := func(sl *stormLock) {
		g := gates[sl.sess]
		for range stormMaxAttempts {
			probe, err := g.admit(runCtx)
			if err != nil {
				return
			}
			actx, cancel := context.WithTimeout(runCtx, attemptTimeout)
			nl, err := sl.m.Lock(actx)
			cancel()
			attempts.Add(1)
			g.done(probe, err)
			if err == nil {
				sl.mu.Lock()
				sl.reheld = true
				sl.mu.Unlock()
				sl.cur.Store(nl)
				if held.Add(1) == int64(nLocks) {
					allHeld.Store(time.Now().UnixNano())
					select {
					case full <- struct{}{}:
					default:
					}
				}
				return
			}
			failed.Add(1)
			if runCtx.Err() != nil {
				return
			}
			if errors.Is(err, mutex.ErrInvalid) || errors.Is(err, mutex.ErrClosed) {
				report(func() { rep.Errors = append(rep.Errors, fmt.Sprintf("re-acquiring %s: %v", sl.m.Name(), err)) })
				return
			}
		}
		report(func() {
			rep.Errors = append(rep.Errors, fmt.Sprintf("re-acquiring %s: no success in %d attempts", sl.m.Name(), stormMaxAttempts))
		})
	}
	var workers sync.WaitGroup
	defer workers.Wait()
	defer stopRun()
	for si := range nSessions {
		for range stormWorkers {
			workers.Go(func() {
				for {
					select {
					case <-runCtx.Done():
						return
					case sl := <-queues[si]:
						reacquire(sl)
					}
				}
			})
		}
	}

	b, err := json.Marshal(ready)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return nil, err
	}

	// Wait for the parent's "restored", then for every lock held.
	restored := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if sc.Text() == "restored" {
				close(restored)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-restored:
	case <-eof:
		return nil, errors.New("stdin closed before the restore")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	dl := time.NewTimer(deadline)
	defer dl.Stop()
wait:
	for range nLocks + 1 { // each turn but the last follows a re-acquisition
		if held.Load() == int64(nLocks) {
			break
		}
		select {
		case <-full:
		case <-dl.C:
			report(func() {
				rep.Errors = append(rep.Errors, fmt.Sprintf("only %d of %d locks held at once within %v of the restore", held.Load(), nLocks, deadline))
			})
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if _, err := fmt.Fprintf(stdout, "{\"all_held\":%d}\n", allHeld.Load()); err != nil {
		return nil, err
	}
	stopRun()
	workers.Wait()
	bg.Wait()

	var fl stormFloorResult
	if floor > 0 {
		fl = stormFloor(ctx, clients, ttl, ready.Rate, floor)
	}

	// Cleanup, timed: the sessions' Close revokes their leases (every key
	// at once). A Mutex's Close still sends a guarded delete of its hold,
	// which the revoke already deleted: a Raft round trip each (20,000
	// took 11.7 s on 32 goroutines), so they run on as many goroutines as
	// took the locks, for etcd to batch them.
	t0 := time.Now()
	for _, s := range sessions {
		_ = s.Close()
	}
	t1 := time.Now()
	stormEach(len(locks), stormWorkers*nSessions, func(i int) { _ = locks[i].m.Close() })
	rep.CloseSessions, rep.CloseMutexes = t1.Sub(t0), time.Since(t1)

	repMu.Lock()
	defer repMu.Unlock()
	rep.Windows = windows
	rep.FloorStart, rep.FloorEnd, rep.FloorLocks, rep.FloorFailed = fl.start, fl.end, fl.locks, fl.failed
	if fl.err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("the raw floor: %v", fl.err))
	}
	rep.AllHeld = allHeld.Load()
	if held.Load() == int64(nLocks) && rep.AllHeld == 0 {
		rep.AllHeld = time.Now().UnixNano() // every lock held without a loss
	}
	rep.Attempts, rep.Failed = attempts.Load(), failed.Load()
	if rep.Relost == 0 {
		rep.RelostSlackMin = 0
	}
	rep.Losses = make([]stormLoss, nLocks)
	for i, sl := range locks {
		sl.mu.Lock()
		rep.Losses[i] = sl.loss
		if sl.reheld {
			rep.Reheld++
		}
		sl.mu.Unlock()
	}
	return rep, nil
}

type stormFloorResult struct {
	start, end    int64
	locks, failed int
	err           error
}

// stormFloor takes new locks with raw etcd concurrency for d, one session
// per client, each paced at rate/len(clients) as baton's re-acquirers are,
// at most stormWorkers at once per session; the sessions' Close at the end
// (outside the window) revokes them.
func stormFloor(ctx context.Context, clients []*clientv3.Client, ttl time.Duration, rate float64, d time.Duration) stormFloorResult {
	var r stormFloorResult
	sessions := make([]*concurrency.Session, 0, len(clients))
	defer func() {
		for _, s := range sessions {
			_ = s.Close()
		}
	}()
	for _, c := range clients {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			r.err = err
			return r
		}
		sessions = append(sessions, s)
	}
	every := time.Duration(float64(time.Second) * float64(len(clients)) / rate)
	fctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var locks, failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for si, s := range sessions {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			slots := make(chan struct{}, stormWorkers)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for i := 0; ; i++ {
				select {
				case <-tick.C:
				case <-fctx.Done():
					return
				}
				select {
				case slots <- struct{}{}:
				case <-fctx.Done():
					return
				}
				inflight.Go(func() {
					defer func() { <-slots }()
					m := concurrency.NewMutex(s, fmt.Sprintf("/%s-raw/%d/%d", stormNamespace, si, i))
					lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
					defer lcancel()
					if err := m.Lock(lctx); err != nil {
						failed.Add(1)
						return
					}
					locks.Add(1)
				})
			}
		})
	}
	wg.Wait()
	r.start, r.end = start.UnixNano(), time.Now().UnixNano()
	r.locks, r.failed = int(locks.Load()), int(failed.Load())
	return r
}

// stormGate paces one session's re-acquirers. While the session is
// failing (a hold was lost, or an attempt failed) only one attempt, a
// probe, is let through at a time, after a full-jitter exponential
// backoff (100 ms doubling to 2 s), so sessions never retry in step; once
// a probe succeeds the others are let through one every `every`.
type stormGate struct {
	every time.Duration

	mu        sync.Mutex
	next      time.Time
	failing   bool
	probing   bool
	failures  int
	recovered chan struct{}
}

// stormRequestsPerReacquire is what a paced re-acquisition may send: its
// enqueue and its key's watch (a create on its session's watch stream,
// made before the enqueue), and a tenth more for retries and lost
// replies' cleanups.
const stormRequestsPerReacquire = 1.1 * 2

// stormMaxBackoff is the longest backoff of a failing session's probe.
const stormMaxBackoff = 2 * time.Second

func newStormGate(every time.Duration) *stormGate {
	return &stormGate{every: every, recovered: make(chan struct{})}
}

func stormBackoff(failures int) time.Duration {
	d := min(100*time.Millisecond<<min(failures, 5), stormMaxBackoff)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// admit waits for the caller's turn; probe says it is the failing
// session's one probe.
func (g *stormGate) admit(ctx context.Context) (probe bool, err error) {
	for range stormMaxAttempts {
		g.mu.Lock()
		if !g.failing {
			now := time.Now()
			if g.next.Before(now) {
				g.next = now
			}
			at := g.next
			g.next = g.next.Add(g.every)
			g.mu.Unlock()
			return false, retry.Sleep(ctx, time.Until(at))
		}
		if !g.probing {
			g.probing = true
			d := stormBackoff(g.failures)
			g.mu.Unlock()
			return true, retry.Sleep(ctx, d)
		}
		ch := g.recovered
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return false, errors.New("storm: gate: too many turns")
}

func (g *stormGate) fail() {
	g.mu.Lock()
	if !g.failing {
		g.failing, g.failures, g.recovered = true, 0, make(chan struct{})
	}
	g.failures++
	g.mu.Unlock()
}

func (g *stormGate) done(probe bool, err error) {
	if err != nil {
		g.fail()
	}
	g.mu.Lock()
	if err == nil && g.failing {
		g.failing, g.failures = false, 0
		close(g.recovered)
	}
	if probe {
		g.probing = false
	}
	g.mu.Unlock()
}

// stormEach runs f(0..n-1) on workers goroutines.
func stormEach(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// totalRequests sums a counter's requests over every method.
func totalRequests(c *harness.Counter) int64 { return harness.RequestsExcept(c.Snapshot()) }
