package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/integration/harness"
)

// lockUnlockShared locks and unlocks one name in a loop on one session,
// for cfg.Duration: the cost of an uncontended acquisition.
func lockUnlockShared(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	sess, err := concurrency.NewSession(env.cli, concurrency.WithTTL(env.cfg.sessionTTL()))
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	m, err := impl.NewMutex(env.cli, sess, name, 0)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	cycle := func() error {
		h, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return h.Unlock(ctx)
	}
	// The first cycle starts the session's watchdog: leave it out.
	if err := cycle(); err != nil {
		return nil, err
	}
	env.counter.Reset()
	lat, elapsed, err := loopFor(ctx, env.cfg.Duration, cycle)
	if err != nil {
		return nil, err
	}
	return cycleValues(lat, elapsed, env.counter.Snapshot()), nil
}

// lockUnlockPerLock creates a lock with its own lease, locks, unlocks and
// closes it (revoking the lease), in a loop: a short-lived process's cost.
func lockUnlockPerLock(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	env.counter.Reset()
	lat, elapsed, err := loopFor(ctx, env.cfg.Duration, func() error {
		m, err := impl.NewMutex(env.cli, nil, name, env.cfg.ttl())
		if err != nil {
			return err
		}
		h, err := m.Lock(ctx)
		if err != nil {
			_ = m.Close()
			return err
		}
		if err := h.Unlock(ctx); err != nil {
			_ = m.Close()
			return err
		}
		return m.Close()
	})
	if err != nil {
		return nil, err
	}
	return cycleValues(lat, elapsed, env.counter.Snapshot()), nil
}

// cycleValues summarizes lock+unlock cycles; counts, the requests sent
// meanwhile, give the etcd requests per cycle (lease renewals aside).
func cycleValues(lat []time.Duration, elapsed time.Duration, counts map[string]int64) []Value {
	l := harness.MsAll(lat)
	return []Value{
		{Metric: "cycles/s", V: float64(len(lat)) / elapsed.Seconds()},
		{Metric: "cycle p50 ms", V: harness.Percentile(l, 50)},
		{Metric: "cycle p99 ms", V: harness.Percentile(l, 99)},
		{Metric: "requests/cycle", V: float64(harness.RequestsExcept(counts, harness.MethodKeepAlive)) / float64(max(len(lat), 1))},
	}
}

// loopFor calls f until d has passed and returns each call's duration.
func loopFor(ctx context.Context, d time.Duration, f func() error) ([]time.Duration, time.Duration, error) {
	var lat []time.Duration
	start := time.Now()
	end := start.Add(d)
	for time.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		t := time.Now()
		if err := f(); err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, time.Since(start), nil
}

// distinctKeys runs goroutines lock+unlock cycles, each on its own name,
// all on one shared session, for cfg.Duration: throughput without
// contention.
func distinctKeys(goroutines int) func(context.Context, *env, harness.Impl, string) ([]Value, error) {
	return func(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
		sess, err := concurrency.NewSession(env.cli, concurrency.WithTTL(env.cfg.sessionTTL()))
		if err != nil {
			return nil, err
		}
		defer sess.Close()
		mus := make([]harness.Mutex, goroutines)
		for i := range mus {
			m, err := impl.NewMutex(env.cli, sess, fmt.Sprintf("%s-%d", name, i), 0)
			if err != nil {
				return nil, err
			}
			defer m.Close()
			mus[i] = m
		}
		lats := make([][]time.Duration, goroutines)
		errs := make([]error, goroutines)
		var ready, start, wg sync.WaitGroup
		start.Add(1)
		for i, m := range mus {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				cycle := func() error {
					h, err := m.Lock(ctx)
					if err != nil {
						return err
					}
					return h.Unlock(ctx)
				}
				errs[i] = cycle()
				ready.Done()
				start.Wait()
				if errs[i] != nil {
					return
				}
				lats[i], _, errs[i] = loopFor(ctx, env.cfg.Duration, cycle)
			}()
		}
		ready.Wait()
		env.counter.Reset()
		t0 := time.Now()
		start.Done()
		wg.Wait()
		elapsed := time.Since(t0)
		var all []time.Duration
		for i := range mus {
			if errs[i] != nil {
				return nil, errs[i]
			}
			all = append(all, lats[i]...)
		}
		return cycleValues(all, elapsed, env.counter.Snapshot()), nil
	}
}
