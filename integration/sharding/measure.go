package sharding

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

// Cycles is the outcome of lock+unlock loops: every cycle's duration and
// the wall time they took.
type Cycles struct {
	Latencies []time.Duration
	Elapsed   time.Duration
	Failed    int
}

// PerSecond is completed cycles per second.
func (c Cycles) PerSecond() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(len(c.Latencies)) / c.Elapsed.Seconds()
}

// Percentile is the p-th percentile cycle time (harness.Percentile).
func (c Cycles) Percentile(p float64) time.Duration { return harness.Percentile(c.Latencies, p) }

// Spread runs perNS goroutines in each namespace for d, each locking and
// unlocking a name of its own on one session per namespace, through r.
// A failed call is counted, not fatal, unless stopOnError.
func Spread(ctx context.Context, r *router.Router, namespaces []string, perNS int, d time.Duration, stopOnError bool) (Cycles, error) {
	type worker struct{ m *mutex.Mutex }
	var workers []worker
	for _, ns := range namespaces {
		cli, err := r.Client(ctx, ns)
		if err != nil {
			return Cycles{}, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30), concurrency.WithContext(ctx))
		if err != nil {
			return Cycles{}, fmt.Errorf("session in %s: %w", ns, err)
		}
		defer sess.Close()
		for i := range perNS {
			m, err := mutex.New(cli, fmt.Sprintf("w%d", i), mutex.WithNamespace(ns), mutex.WithSession(sess))
			if err != nil {
				return Cycles{}, err
			}
			defer m.Close()
			workers = append(workers, worker{m})
		}
	}
	cycle := func(m *mutex.Mutex) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := m.Lock(cctx)
		if err != nil {
			return err
		}
		return l.Unlock(cctx)
	}
	for _, w := range workers { // warm-up: sessions' watchdogs and watches
		if err := cycle(w.m); err != nil {
			return Cycles{}, err
		}
	}
	var (
		mu    sync.Mutex
		out   Cycles
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for _, w := range workers {
		wg.Go(func() {
			var lat []time.Duration
			failed := 0
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				if err := cycle(w.m); err != nil {
					failed++
					if stopOnError {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
						break
					}
					continue
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			out.Latencies = append(out.Latencies, lat...)
			out.Failed += failed
			mu.Unlock()
		})
	}
	wg.Wait()
	out.Elapsed = time.Since(start)
	return out, first
}

// Ms is a duration in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
