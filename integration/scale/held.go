package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// HeldConfig sizes the held phase: Locks mutexes, each on its own name,
// held on one session by a child process (so that the heap measured is the
// client's alone), and the same count taken by raw etcd concurrency on one
// etcd session; renewals are also counted with Small locks held.
type HeldConfig struct {
	Locks int
	// Small is the count renewals are compared at (0: none).
	Small int
	// Runs of each size and implementation, alternating which goes first.
	Runs int
	// TTL of the session's lease; renewals are counted for Window.
	TTL    time.Duration
	Window time.Duration
	// Command runs a child: Command plus "held-client" and flags must run
	// harness.HeldClient (the baton-scale program does). Empty, the locks are
	// held in this process, and the heap figure includes the server's.
	Command []string
	// Deadline bounds the phase.
	Deadline time.Duration
}

// Validate rejects sizes the phase cannot take, naming the field and bound.
func (c HeldConfig) Validate() error {
	var errs []error
	if c.Locks < 1 {
		errs = append(errs, fmt.Errorf("held: Locks must be at least 1, got %d", c.Locks))
	}
	if c.Small < 0 || (c.Locks > 0 && c.Small > c.Locks) {
		errs = append(errs, fmt.Errorf("held: Small must be between 0 and Locks (%d), got %d", c.Locks, c.Small))
	}
	if c.Runs < 1 {
		errs = append(errs, fmt.Errorf("held: Runs must be at least 1, got %d", c.Runs))
	}
	errs = append(errs, checkTTL("held", c.TTL))
	if c.Window < c.TTL {
		errs = append(errs, fmt.Errorf("held: Window must be at least TTL (%v) to count a TTL's renewals, got %v", c.TTL, c.Window))
	}
	errs = append(errs, checkDeadline("held", c.Deadline))
	return errors.Join(errs...)
}

// HeldResult is the held phase's figures: medians over the runs, with the
// lowest and highest where runs differ.
type HeldResult struct {
	Locks int `json:"locks"`
	Small int `json:"small"`
	Runs  int `json:"runs"`
	// HeapPerLock is the client's live heap growth per held lock (baton,
	// session.New); GoroutinesPerLock its goroutine growth per lock.
	HeapPerLock       Spread  `json:"heap_bytes_per_lock"`
	GoroutinesPerLock float64 `json:"goroutines_per_lock"`
	// KeepAlivesPerTTL are the LeaseKeepAlive messages the client sent per
	// TTL with Small and with Locks held (a gRPC stream interceptor's
	// count); OtherPerSecond every other request meanwhile, with Locks held.
	KeepAlivesPerTTLSmall Spread  `json:"keepalives_per_ttl_small"`
	KeepAlivesPerTTL      Spread  `json:"keepalives_per_ttl"`
	OtherPerSecond        float64 `json:"other_requests_per_second"`
	// AcquireSeconds is how long taking the Locks took (32 at a time),
	// baton's and raw's, and AcquireRatio the ratio of their medians.
	AcquireSeconds    Spread  `json:"acquire_seconds"`
	RawAcquireSeconds Spread  `json:"raw_acquire_seconds"`
	AcquireRatio      float64 `json:"acquire_ratio"`
	// RawHeapPerLock is raw's client heap per lock, for comparison.
	RawHeapPerLock Spread `json:"raw_heap_bytes_per_lock"`
	// Server is the etcd member's growth while baton's Locks were held
	// (its peak over the phase): watchers, keys and db bytes; per lock
	// below.
	Server          ServerStats `json:"server_growth"`
	WatchersPerLock float64     `json:"watchers_per_lock"`
	KeysPerLock     float64     `json:"keys_per_lock"`
	DBBytesPerLock  float64     `json:"db_bytes_per_lock"`
}

// Spread is a median with the lowest and highest run.
type Spread = harness.Summary

func spread(v []float64) Spread { return harness.Summarize(v) }

// Held runs the held phase against the member at endpoint, which must run
// in this process (its metrics are read while the child holds).
func Held(ctx context.Context, endpoint string, cfg HeldConfig, progress io.Writer) (HeldResult, error) {
	if err := cfg.Validate(); err != nil {
		return HeldResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	res := HeldResult{Locks: cfg.Locks, Small: cfg.Small, Runs: cfg.Runs}
	var heap, rawHeap, kaSmall, kaBig, acq, rawAcq, gor, other []float64
	perTTL := func(r harness.HeldResult) float64 { return r.RenewalsPerSecond * cfg.TTL.Seconds() }
	for run := range cfg.Runs {
		type step struct {
			impl string
			n    int
		}
		steps := []step{{"baton", cfg.Locks}, {"raw", cfg.Locks}}
		if run%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		if cfg.Small > 0 {
			steps = append([]step{{"baton", cfg.Small}}, steps...)
		}
		for _, st := range steps {
			start := time.Now()
			r, peak, err := holdWatched(ctx, endpoint, cfg, st.impl, st.n)
			if err != nil {
				return res, fmt.Errorf("held %d (%s), run %d: %w", st.n, st.impl, run+1, err)
			}
			switch {
			case st.impl == "raw":
				rawAcq, rawHeap = append(rawAcq, r.LockSeconds), append(rawHeap, r.HeapPerLock)
			case st.n == cfg.Locks:
				acq, heap, gor = append(acq, r.LockSeconds), append(heap, r.HeapPerLock), append(gor, r.GoroutinesPerLock)
				kaBig, other = append(kaBig, perTTL(r)), append(other, r.OtherPerSecond)
				if run == 0 {
					res.Server = peak
				}
			}
			if st.impl == "baton" && st.n == cfg.Small {
				kaSmall = append(kaSmall, perTTL(r))
			}
			if progress != nil {
				fmt.Fprintf(progress, "  held %d (%s) run %d/%d: %.1fs, acquire %.2fs, heap %.0f B/lock, goroutines/lock %.4f, keepalives/ttl %.2f, server +%.0f watchers +%.0f keys\n",
					st.n, st.impl, run+1, cfg.Runs, time.Since(start).Seconds(), r.LockSeconds, r.HeapPerLock, r.GoroutinesPerLock, perTTL(r), peak.Watchers, peak.Keys)
			}
		}
	}
	res.HeapPerLock, res.RawHeapPerLock = spread(heap), spread(rawHeap)
	res.GoroutinesPerLock = spread(gor).Max
	res.KeepAlivesPerTTLSmall, res.KeepAlivesPerTTL = spread(kaSmall), spread(kaBig)
	res.OtherPerSecond = spread(other).Median
	res.AcquireSeconds, res.RawAcquireSeconds = spread(acq), spread(rawAcq)
	if res.RawAcquireSeconds.Median > 0 {
		res.AcquireRatio = res.AcquireSeconds.Median / res.RawAcquireSeconds.Median
	}
	n := float64(cfg.Locks)
	res.WatchersPerLock, res.KeysPerLock, res.DBBytesPerLock = res.Server.Watchers/n, res.Server.Keys/n, res.Server.DBBytes/n
	return res, nil
}

// holdWatched runs one child holding n locks and samples the server's
// metrics meanwhile; it returns the child's figures and the server's peak
// growth.
func holdWatched(ctx context.Context, endpoint string, cfg HeldConfig, impl string, n int) (harness.HeldResult, ServerStats, error) {
	base, err := ReadServer(nil)
	if err != nil {
		return harness.HeldResult{}, ServerStats{}, err
	}
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if s, err := ReadServer(nil); err == nil {
					peak = peak.Max(s)
				}
			}
		}
	}()
	via := "new" // a baton session of its own (raw ignores it)
	var r harness.HeldResult
	if len(cfg.Command) > 0 {
		r, err = harness.HoldManyIn(ctx, cfg.Command, endpoint, impl, via, n, cfg.TTL, cfg.Window)
	} else if im, ierr := harness.ImplByName(impl); ierr != nil {
		err = ierr
	} else {
		r, err = harness.HoldMany(ctx, endpoint, im, via, n, cfg.TTL, cfg.Window)
	}
	close(stop)
	wg.Wait()
	return r, peak.Sub(base), err
}

// DefaultHeldConfig is the full-size held phase: 100,000 locks, renewals
// also counted at 1,000, TTL 3 s counted over 6 s, two runs (baton first,
// then raw first).
func DefaultHeldConfig() HeldConfig {
	return HeldConfig{Locks: 100_000, Small: 1000, Runs: 2, TTL: 3 * time.Second, Window: 6 * time.Second, Deadline: 10 * time.Minute}
}
