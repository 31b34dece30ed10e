package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/integration/bench"
	"github.com/batonhq/baton/integration/netproxy"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// StormConfig sizes the storm phase: Locks mutexes held across Sessions
// baton sessions whose clients reach one embedded etcd member (fsync on)
// through a netproxy, which is blackholed for Outage and then restored.
type StormConfig struct {
	// Locks is the number of mutexes held, each on its own name.
	Locks int
	// Sessions is the number of baton sessions (one etcd client each).
	Sessions int
	// Outage is how long the proxy blackholes the sessions' traffic; it
	// must exceed TTL so that the server expires every lease.
	Outage time.Duration
	// TTL is each session's lease TTL, whole seconds, at least
	// session.MinTTL; the safety margin is TTL/5.
	TTL time.Duration
	// Rate caps re-acquisitions per second across all sessions once etcd
	// answers again (each session gets Rate/Sessions). Zero means
	// RateFraction of the unthrottled rate measured while taking the locks
	// in the same run.
	Rate float64
	// RateFraction is the share of the measured rate used when Rate is
	// zero: more than 0, at most 1; zero means 1/4.
	RateFraction float64
	// Quiet is how long etcd's latency is probed before the cut.
	Quiet time.Duration
	// AttemptTimeout bounds one Lock attempt of a re-acquirer.
	AttemptTimeout time.Duration
	// Deadline bounds the recovery; zero means 3 × Locks/Rate + 30 s.
	Deadline time.Duration
}

// DefaultStormConfig is the full-size storm: 100,000 locks, 20 sessions,
// a 20 s outage, 6 s leases, re-acquisition capped at a quarter of the
// rate measured while taking the locks.
func DefaultStormConfig() StormConfig {
	return StormConfig{Locks: 100_000, Sessions: 20, Outage: 20 * time.Second, TTL: 6 * time.Second,
		Quiet: 5 * time.Second, AttemptTimeout: 2 * time.Second}
}

// stormWorkers is how many Lock calls of one session run at once, while
// taking the locks and while taking them again (paced by the gate then).
const stormWorkers = 32

// stormMaxAttempts bounds the Lock attempts of one re-acquisition.
const stormMaxAttempts = 1000

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound.
func (c StormConfig) Validate() error {
	var errs []error
	if c.Locks <= 0 {
		errs = append(errs, fmt.Errorf("storm: Locks must be at least 1, got %d", c.Locks))
	}
	if c.Sessions <= 0 {
		errs = append(errs, fmt.Errorf("storm: Sessions must be at least 1, got %d", c.Sessions))
	} else if c.Locks > 0 && c.Sessions > c.Locks {
		errs = append(errs, fmt.Errorf("storm: Sessions must be at most Locks (%d), got %d", c.Locks, c.Sessions))
	}
	if c.TTL < session.MinTTL || c.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("storm: TTL must be whole seconds and at least %v, got %v", session.MinTTL, c.TTL))
	}
	if c.Outage <= c.TTL {
		errs = append(errs, fmt.Errorf("storm: Outage must exceed TTL (%v) so that the server expires the leases, got %v", c.TTL, c.Outage))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("storm: Rate must be at least 0 (0: RateFraction of the measured rate), got %g", c.Rate))
	}
	if c.RateFraction < 0 || c.RateFraction > 1 {
		errs = append(errs, fmt.Errorf("storm: RateFraction must be in (0, 1] (0: 1/4), got %g", c.RateFraction))
	}
	if c.Quiet < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("storm: Quiet must be at least 100ms, got %v", c.Quiet))
	}
	if c.AttemptTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("storm: AttemptTimeout must be at least 100ms, got %v", c.AttemptTimeout))
	}
	if c.Deadline < 0 {
		errs = append(errs, fmt.Errorf("storm: Deadline must be at least 0 (0: 3 × Locks/Rate + 30s), got %v", c.Deadline))
	}
	return errors.Join(errs...)
}

// StormResult is what the storm measured.
type StormResult struct {
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`

	Locks         int     `json:"locks"`
	Sessions      int     `json:"sessions"`
	OutageSeconds float64 `json:"outage_seconds"`
	TTLSeconds    float64 `json:"ttl_seconds"`
	// AcquireSeconds is how long taking every lock took at first,
	// unthrottled; AcquirePerSecond the rate.
	AcquireSeconds   float64 `json:"acquire_seconds"`
	AcquirePerSecond float64 `json:"acquire_per_second"`
	// RequestsPerAcquire is requests sent per lock while taking them.
	RequestsPerAcquire float64 `json:"requests_per_acquire"`

	// Lost counts holders whose Context ended. EndedBeforeExpiry counts
	// those that ended before the send time of their lease's last
	// acknowledged renewal + TTL (the earliest the server can expire it);
	// SlackMin is the least time left to that instant.
	Lost              int           `json:"lost"`
	EndedBeforeExpiry int           `json:"ended_before_expiry"`
	SlackMin          time.Duration `json:"slack_min_ns"`
	// ServerDeleted counts first holders' keys seen deleted by the server
	// (lease expiry) through a direct watch; EndedBeforeDelete those whose
	// Context had ended by then; ServerSlackMin the least lead.
	ServerDeleted     int           `json:"server_deleted"`
	EndedBeforeDelete int           `json:"ended_before_delete"`
	ServerSlackMin    time.Duration `json:"server_slack_min_ns"`
	// LossAfterCut is the spread of Context ends after the cut.
	LossAfterCutMin time.Duration `json:"loss_after_cut_min_ns"`
	LossAfterCutMax time.Duration `json:"loss_after_cut_max_ns"`

	// Rate is the re-acquisition cap used. RequestBound is the request
	// rate it implies: Rate × RequestsPerAcquire + the quiet background
	// (renewals) + 4 requests per session re-established (lease grant,
	// namespace watch).
	Rate         float64 `json:"rate"`
	RequestBound float64 `json:"request_bound_per_second"`
	// QuietPerSecond is requests/s while the locks were held (renewals).
	QuietPerSecond float64 `json:"quiet_per_second"`
	// PeakPerSecond is the most requests sent in any 1 s (sliding by
	// 100 ms) from the restore to the last re-acquisition;
	// OutagePeakPerSecond the same during the outage.
	PeakPerSecond       float64 `json:"peak_per_second"`
	OutagePeakPerSecond float64 `json:"outage_peak_per_second"`
	// Attempts counts Lock attempts after the losses; FailedAttempts those
	// that failed (all of them while etcd was cut off).
	Attempts       int64 `json:"attempts"`
	FailedAttempts int64 `json:"failed_attempts"`
	// Reheld counts locks held again; RecoverySeconds from the restore to
	// the last re-acquisition; PredictedSeconds is Locks/Rate + the
	// longest backoff, what the cap alone allows.
	Reheld           int     `json:"reheld"`
	RecoverySeconds  float64 `json:"recovery_seconds"`
	PredictedSeconds float64 `json:"predicted_seconds"`
	// Latency of probes by a client that bypasses the proxy: a
	// linearizable Get every 10 ms and a Put every 50 ms, while quiet
	// (before the cut) and during the recovery.
	QuietGetP50, QuietGetP99       time.Duration
	RecoveryGetP50, RecoveryGetP99 time.Duration
	QuietPutP50, QuietPutP99       time.Duration
	RecoveryPutP50, RecoveryPutP99 time.Duration
	// ProbeSamples: Gets quiet, Gets during recovery, Puts quiet, Puts
	// during recovery.
	ProbeSamples [4]int `json:"probe_samples"`
	// KeysLeft counts keys under the storm's namespace after cleanup, but
	// the namespace's release mark (/<ns>/v1/released).
	KeysLeft int `json:"keys_left"`
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

// stormMaxBackoff is the longest backoff of a failing session's probe.
const stormMaxBackoff = 2 * time.Second

func newStormGate(every time.Duration) *stormGate {
	return &stormGate{every: every, recovered: make(chan struct{})}
}

func stormBackoff(failures int) time.Duration {
	d := min(100*time.Millisecond<<min(failures, 5), stormMaxBackoff)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// stormSleep waits d or until ctx ends.
func stormSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
			return false, stormSleep(ctx, time.Until(at))
		}
		if !g.probing {
			g.probing = true
			d := stormBackoff(g.failures)
			g.mu.Unlock()
			return true, stormSleep(ctx, d)
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

type stormLock struct {
	m     *mutex.Mutex
	sess  int
	first *mutex.Lock

	mu       sync.Mutex
	lostAt   time.Time
	expiry   time.Time // the last acknowledged renewal's send time + TTL
	reheldAt time.Time
	reheld   *mutex.Lock
}

type stormSample struct {
	at  time.Time
	lat time.Duration
}

// stormNamespace holds the storm's keys.
const stormNamespace = "scale-storm"

// Storm runs the storm phase: take Locks locks across Sessions sessions,
// cut etcd off for Outage, restore it, and take every lock again under
// the rate cap. It checks that every holder's Context ended before its
// lease could expire, that the requests stayed under the bound the cap
// implies, that a direct client's p99 latency during the recovery stayed
// within 5× its quiet p99, and that every lock was held again. A failed
// check is in StormResult.Failures (OK false); an error means the phase
// could not run.
func Storm(ctx context.Context, cfg StormConfig, progress io.Writer) (StormResult, error) {
	if err := cfg.Validate(); err != nil {
		return StormResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	if cfg.RateFraction == 0 {
		cfg.RateFraction = 0.25
	}
	res := StormResult{Locks: cfg.Locks, Sessions: cfg.Sessions, OutageSeconds: cfg.Outage.Seconds(), TTLSeconds: cfg.TTL.Seconds()}
	margin := cfg.TTL / 5

	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	proxy, err := netproxy.New(srv.Etcd().Clients[0].Addr().String())
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	probeCli, err := srv.NewClient()
	if err != nil {
		return res, err
	}
	defer probeCli.Close()

	counter := bench.NewCounter()
	sessions := make([]*session.Session, cfg.Sessions)
	clients := make([]*clientv3.Client, cfg.Sessions)
	defer func() {
		for i := range sessions {
			if sessions[i] != nil {
				_ = sessions[i].Close()
			}
			if clients[i] != nil {
				_ = clients[i].Close()
			}
		}
	}()
	for i := range sessions {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{proxy.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: counter.DialOptions(),
		})
		if err != nil {
			return res, err
		}
		clients[i] = cli
		s, err := session.New(cli, session.WithTTL(cfg.TTL), session.WithSafetyMargin(margin))
		if err != nil {
			return res, err
		}
		sessions[i] = s
	}

	// Take every lock, unthrottled: stormWorkers Lock calls at once per
	// session.
	locks := make([]*stormLock, cfg.Locks)
	defer func() {
		// The sessions' Close revokes their leases (every key at once);
		// the Mutexes then have nothing left to release.
		for i := range sessions {
			if sessions[i] != nil {
				_ = sessions[i].Close()
			}
		}
		stormEach(len(locks), func(i int) {
			if locks[i] != nil {
				_ = locks[i].m.Close()
			}
		})
	}()
	start := time.Now()
	counter.Reset()
	{
		var wg sync.WaitGroup
		var first atomic.Pointer[error]
		for si := range sessions {
			for w := range stormWorkers {
				wg.Go(func() {
					for i := si + w*cfg.Sessions; i < cfg.Locks; i += stormWorkers * cfg.Sessions {
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
								locks[i] = &stormLock{m: m, sess: si, first: l}
								continue
							}
							_ = m.Close()
						}
						err = fmt.Errorf("storm: taking lock %d: %w", i, err)
						first.CompareAndSwap(nil, &err)
						return
					}
				})
			}
		}
		wg.Wait()
		if e := first.Load(); e != nil {
			return res, *e
		}
	}
	acq := time.Since(start)
	res.AcquireSeconds = acq.Seconds()
	res.AcquirePerSecond = float64(cfg.Locks) / acq.Seconds()
	res.RequestsPerAcquire = float64(stormTotal(counter)) / float64(cfg.Locks)
	fmt.Fprintf(progress, "storm: took %d locks on %d sessions in %.2f s (%.0f/s, %.2f requests each)\n",
		cfg.Locks, cfg.Sessions, acq.Seconds(), res.AcquirePerSecond, res.RequestsPerAcquire)

	res.Rate = cfg.Rate
	if res.Rate == 0 {
		res.Rate = res.AcquirePerSecond * cfg.RateFraction
	}
	res.PredictedSeconds = float64(cfg.Locks)/res.Rate + stormMaxBackoff.Seconds()
	if cfg.Deadline == 0 {
		cfg.Deadline = time.Duration(3*float64(cfg.Locks)/res.Rate*float64(time.Second)) + 30*time.Second
	}
	perSession := res.Rate / float64(cfg.Sessions)
	gates := make([]*stormGate, cfg.Sessions)
	for i := range gates {
		gates[i] = newStormGate(time.Duration(float64(time.Second) / perSession))
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopRun()

	// Requests sent, in 100 ms windows.
	type window struct {
		at time.Time
		n  int64
	}
	var (
		winMu   sync.Mutex
		windows []window
	)
	bg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		last := stormTotal(counter)
		for {
			select {
			case <-runCtx.Done():
				return
			case now := <-t.C:
				n := stormTotal(counter)
				winMu.Lock()
				windows = append(windows, window{now, n - last})
				winMu.Unlock()
				last = n
			}
		}
	})

	// Probes by a client that bypasses the proxy.
	var (
		probeMu   sync.Mutex
		getProbes []stormSample
		putProbes []stormSample
	)
	probe := func(every time.Duration, op func(context.Context) error, out *[]stormSample) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			pctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
			s := time.Now()
			err := op(pctx)
			lat := time.Since(s)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					return
				}
				lat = 5 * time.Second
			}
			probeMu.Lock()
			*out = append(*out, stormSample{s, lat})
			probeMu.Unlock()
		}
	}
	bg.Go(func() {
		probe(10*time.Millisecond, func(c context.Context) error { _, err := probeCli.Get(c, "scale-storm-probe"); return err }, &getProbes)
	})
	bg.Go(func() {
		probe(50*time.Millisecond, func(c context.Context) error { _, err := probeCli.Put(c, "scale-storm-probe", "x"); return err }, &putProbes)
	})

	// The server's deletions of the first holders' keys, seen directly.
	var (
		delMu   sync.Mutex
		deleted = make(map[string]time.Time, cfg.Locks)
	)
	wctx, stopWatch := context.WithCancel(clientv3.WithRequireLeader(runCtx))
	defer stopWatch()
	wch := probeCli.Watch(wctx, "/"+stormNamespace+"/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	bg.Go(func() {
		for wr := range wch {
			now := time.Now()
			delMu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					if _, ok := deleted[string(ev.Kv.Key)]; !ok {
						deleted[string(ev.Kv.Key)] = now
					}
				}
			}
			delMu.Unlock()
		}
	})

	quietStart := time.Now()
	quietFrom := stormTotal(counter)
	if err := stormSleep(ctx, cfg.Quiet); err != nil {
		return res, err
	}
	res.QuietPerSecond = float64(stormTotal(counter)-quietFrom) / time.Since(quietStart).Seconds()

	// Every holder: when its Context ends, note when and its lease's
	// earliest expiry, and queue it for its session's re-acquirers.
	var (
		reheld   atomic.Int64
		attempts atomic.Int64
		failed   atomic.Int64
		allHeld  = make(chan struct{})
		errMu    sync.Mutex
		lockErrs []string
	)
	queues := make([]chan *stormLock, cfg.Sessions)
	for i := range queues {
		queues[i] = make(chan *stormLock, cfg.Locks/cfg.Sessions+1)
	}
	for _, sl := range locks {
		context.AfterFunc(sl.first.Context(), func() {
			now := time.Now()
			sl.mu.Lock()
			sl.lostAt = now
			sl.expiry = sl.first.Deadline().Add(margin)
			sl.mu.Unlock()
			gates[sl.sess].fail()
			queues[sl.sess] <- sl
		})
	}
	reacquire := func(sl *stormLock) {
		g := gates[sl.sess]
		for range stormMaxAttempts {
			probe, err := g.admit(runCtx)
			if err != nil {
				return
			}
			actx, cancel := context.WithTimeout(runCtx, cfg.AttemptTimeout)
			nl, err := sl.m.Lock(actx)
			cancel()
			attempts.Add(1)
			g.done(probe, err)
			if err == nil {
				sl.mu.Lock()
				sl.reheld, sl.reheldAt = nl, time.Now()
				sl.mu.Unlock()
				if reheld.Add(1) == int64(len(locks)) {
					close(allHeld)
				}
				return
			}
			failed.Add(1)
			if runCtx.Err() != nil {
				return
			}
			if errors.Is(err, mutex.ErrInvalid) || errors.Is(err, mutex.ErrClosed) {
				errMu.Lock()
				lockErrs = append(lockErrs, fmt.Sprintf("re-acquiring %s: %v", sl.m.Name(), err))
				errMu.Unlock()
				return
			}
		}
		errMu.Lock()
		lockErrs = append(lockErrs, fmt.Sprintf("re-acquiring %s: no success in %d attempts", sl.m.Name(), stormMaxAttempts))
		errMu.Unlock()
	}
	var workers sync.WaitGroup
	defer workers.Wait()
	defer stopRun()
	for si := range cfg.Sessions {
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

	cut := time.Now()
	proxy.Blackhole()
	fmt.Fprintf(progress, "storm: quiet %.1f s at %.0f requests/s; etcd cut off for %v\n", cfg.Quiet.Seconds(), res.QuietPerSecond, cfg.Outage)
	if err := stormSleep(ctx, cfg.Outage); err != nil {
		return res, err
	}
	restore := time.Now()
	proxy.Restore()
	lost := 0
	for _, sl := range locks {
		sl.mu.Lock()
		if !sl.lostAt.IsZero() {
			lost++
		}
		sl.mu.Unlock()
	}
	fmt.Fprintf(progress, "storm: traffic restored; %d of %d holders had seen their Context end; re-acquiring at most %.0f/s (predicted %.1f s)\n",
		lost, cfg.Locks, res.Rate, res.PredictedSeconds)

	dl := time.NewTimer(cfg.Deadline)
	defer dl.Stop()
	select {
	case <-allHeld:
	case <-dl.C:
		res.Failures = append(res.Failures, fmt.Sprintf("only %d of %d locks held again within %v", reheld.Load(), cfg.Locks, cfg.Deadline))
	case <-ctx.Done():
		return res, ctx.Err()
	}
	end := time.Now()
	stopRun()
	workers.Wait()
	bg.Wait()
	res.Attempts, res.FailedAttempts = attempts.Load(), failed.Load()

	// Losses.
	res.SlackMin, res.ServerSlackMin, res.LossAfterCutMin = 1<<62, 1<<62, 1<<62
	var last time.Time
	var late, lateServer []string
	for i, sl := range locks {
		sl.mu.Lock()
		if !sl.lostAt.IsZero() {
			res.Lost++
			if sl.lostAt.Before(sl.expiry) {
				res.EndedBeforeExpiry++
			} else {
				late = append(late, fmt.Sprintf("lock %d: Context ended %v after renewal+TTL", i, sl.lostAt.Sub(sl.expiry)))
			}
			res.SlackMin = min(res.SlackMin, sl.expiry.Sub(sl.lostAt))
			res.LossAfterCutMin = min(res.LossAfterCutMin, sl.lostAt.Sub(cut))
			res.LossAfterCutMax = max(res.LossAfterCutMax, sl.lostAt.Sub(cut))
			if sl.lostAt.Before(cut) {
				res.Failures = append(res.Failures, fmt.Sprintf("lock %d lost before the cut: %v", i, context.Cause(sl.first.Context())))
			}
		}
		if at, ok := deleted[sl.first.Key()]; ok {
			res.ServerDeleted++
			switch {
			case sl.lostAt.IsZero():
				lateServer = append(lateServer, fmt.Sprintf("lock %d: key deleted by the server, Context never ended", i))
			case sl.lostAt.Before(at):
				res.EndedBeforeDelete++
				res.ServerSlackMin = min(res.ServerSlackMin, at.Sub(sl.lostAt))
			default:
				lateServer = append(lateServer, fmt.Sprintf("lock %d: Context ended %v after the server deleted the key", i, sl.lostAt.Sub(at)))
			}
		}
		if sl.reheld != nil {
			res.Reheld++
			if sl.reheldAt.After(last) {
				last = sl.reheldAt
			}
			if sl.reheld.Context().Err() != nil {
				res.Failures = append(res.Failures, fmt.Sprintf("lock %d's new hold ended: %v", i, context.Cause(sl.reheld.Context())))
			}
		}
		sl.mu.Unlock()
	}
	if res.Lost == 0 {
		res.SlackMin, res.LossAfterCutMin = 0, 0
	}
	if res.EndedBeforeDelete == 0 {
		res.ServerSlackMin = 0
	}
	res.Failures = append(res.Failures, stormFirst(late, 5)...)
	res.Failures = append(res.Failures, stormFirst(lateServer, 5)...)
	if !last.IsZero() {
		res.RecoverySeconds = last.Sub(restore).Seconds()
	}
	if res.Lost != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("%d of %d holders' Context ended", res.Lost, cfg.Locks))
	}
	if res.ServerDeleted != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("the server deleted %d of %d first holders' keys", res.ServerDeleted, cfg.Locks))
	}
	if res.Reheld != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("%d of %d locks held again", res.Reheld, cfg.Locks))
	}
	res.Failures = append(res.Failures, stormFirst(lockErrs, 5)...)

	// Requests.
	res.RequestBound = res.Rate*res.RequestsPerAcquire + res.QuietPerSecond + 4*float64(cfg.Sessions)
	for i := range windows {
		if !windows[i].at.After(cut.Add(100 * time.Millisecond)) {
			continue
		}
		var n int64
		j := i
		for ; j < len(windows) && windows[j].at.Before(windows[i].at.Add(time.Second)); j++ {
			n += windows[j].n
		}
		if j == len(windows) && j-i < 10 {
			n = n * 10 / int64(j-i) // a short tail, scaled to 1 s
		}
		switch {
		case !windows[i].at.Before(restore) && !windows[i].at.After(end):
			res.PeakPerSecond = max(res.PeakPerSecond, float64(n))
		case windows[i].at.Before(restore.Add(-time.Second)):
			res.OutagePeakPerSecond = max(res.OutagePeakPerSecond, float64(n))
		}
	}
	if res.PeakPerSecond > res.RequestBound {
		res.Failures = append(res.Failures, fmt.Sprintf("peak %.0f requests/s after the restore exceeds the bound %.0f", res.PeakPerSecond, res.RequestBound))
	}

	// Probe latencies.
	split := func(ps []stormSample) (quiet, rec []time.Duration) {
		for _, p := range ps {
			switch {
			case !p.at.Before(quietStart) && p.at.Before(cut):
				quiet = append(quiet, p.lat)
			case !p.at.Before(restore) && !p.at.After(end):
				rec = append(rec, p.lat)
			}
		}
		return quiet, rec
	}
	qg, rg := split(getProbes)
	qp, rp := split(putProbes)
	res.ProbeSamples = [4]int{len(qg), len(rg), len(qp), len(rp)}
	res.QuietGetP50, res.QuietGetP99 = stormPercentile(qg, 50), stormPercentile(qg, 99)
	res.RecoveryGetP50, res.RecoveryGetP99 = stormPercentile(rg, 50), stormPercentile(rg, 99)
	res.QuietPutP50, res.QuietPutP99 = stormPercentile(qp, 50), stormPercentile(qp, 99)
	res.RecoveryPutP50, res.RecoveryPutP99 = stormPercentile(rp, 50), stormPercentile(rp, 99)
	if res.QuietGetP99 > 0 && res.RecoveryGetP99 > 5*res.QuietGetP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Get p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryGetP99, res.QuietGetP99))
	}
	if res.QuietPutP99 > 0 && res.RecoveryPutP99 > 5*res.QuietPutP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Put p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryPutP99, res.QuietPutP99))
	}

	// Cleanup: the sessions' leases go, with every key; then the Mutexes.
	for i := range sessions {
		_ = sessions[i].Close()
	}
	stormEach(len(locks), func(i int) { _ = locks[i].m.Close() })
	left, err := stormKeysLeft(ctx, probeCli, stormNamespace)
	if err != nil {
		return res, fmt.Errorf("storm: %w", err)
	}
	res.KeysLeft = len(left)
	if res.KeysLeft != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d keys left under /%s/ after cleanup, first %q", res.KeysLeft, stormNamespace, left[0]))
	}

	fmt.Fprintf(progress, "storm: %d of %d held again in %.2f s (cap %.0f/s, predicted %.1f s); peak %.0f requests/s (bound %.0f); Get p99 quiet %v recovery %v; Put p99 quiet %v recovery %v\n",
		res.Reheld, cfg.Locks, res.RecoverySeconds, res.Rate, res.PredictedSeconds, res.PeakPerSecond, res.RequestBound,
		res.QuietGetP99, res.RecoveryGetP99, res.QuietPutP99, res.RecoveryPutP99)
	res.OK = len(res.Failures) == 0
	return res, nil
}

// stormKeysLeft lists the keys under namespace ns but its release mark
// (/<ns>/v1/released, one per namespace, no lease: kept by design).
func stormKeysLeft(ctx context.Context, cli *clientv3.Client, ns string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pfx := "/" + ns + "/"
	r, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing keys left under %s: %w", pfx, err)
	}
	var left []string
	for _, kv := range r.Kvs {
		if k := string(kv.Key); k != keys.ReleasedKey(pfx+"v1/") {
			left = append(left, k)
		}
	}
	return left, nil
}

// stormTotal sums a counter's requests over every method.
func stormTotal(c *bench.Counter) int64 {
	var n int64
	for _, v := range c.Snapshot() {
		n += v
	}
	return n
}

// stormEach runs f(0..n-1) on stormWorkers goroutines.
func stormEach(n int, f func(i int)) {
	var wg sync.WaitGroup
	for w := range stormWorkers {
		wg.Go(func() {
			for i := w; i < n; i += stormWorkers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// stormFirst keeps the first n of msgs, saying how many more there were.
func stormFirst(msgs []string, n int) []string {
	if len(msgs) <= n {
		return msgs
	}
	return append(slices.Clone(msgs[:n]), fmt.Sprintf("... and %d more", len(msgs)-n))
}

// stormPercentile is the p-th percentile of d (nearest rank), zero when
// empty.
func stormPercentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}
