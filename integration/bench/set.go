package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/mutex"
)

// setPair runs two jobs that each lock two names, "a" and "b", in a loop:
// one asks for {a, b}, the other for {b, a}. baton takes each pair with
// one mutex.Set (one transaction, one token, no lock order to agree on);
// raw takes two etcd concurrency Mutexes one after the other, in one
// agreed order (a, then b), the way one must to avoid a deadlock with
// them. It measures acquisitions of the pair per second and the handoff
// (one job's release returns → the other's acquisition returns).
func setPair(ctx context.Context, env *env, impl Impl, name string) ([]Value, error) {
	sessions, closeSessions, err := ownSessions(env, 2)
	defer closeSessions()
	if err != nil {
		return nil, err
	}
	a, b := name+"-a", name+"-b"
	type pair struct {
		lock   func(ctx context.Context) error
		unlock func(ctx context.Context) error
	}
	jobs := make([]pair, 2)
	for i, sess := range sessions {
		if impl.Name() == "baton" {
			names := []string{a, b}
			if i == 1 {
				names = []string{b, a}
			}
			s, err := mutex.NewSet(sess.Client(), names, mutex.WithNamespace(namespace), mutex.WithSession(sess))
			if err != nil {
				return nil, err
			}
			defer s.Close()
			var l *mutex.Lock
			jobs[i] = pair{
				lock:   func(ctx context.Context) (err error) { l, err = s.Lock(ctx); return err },
				unlock: func(ctx context.Context) error { return l.Unlock(ctx) },
			}
			continue
		}
		ma := concurrency.NewMutex(sess, "/"+namespace+"/v1/lock/"+a)
		mb := concurrency.NewMutex(sess, "/"+namespace+"/v1/lock/"+b)
		jobs[i] = pair{
			lock: func(ctx context.Context) error {
				if err := ma.Lock(ctx); err != nil {
					return err
				}
				if err := mb.Lock(ctx); err != nil {
					return errors.Join(err, ma.Unlock(context.WithoutCancel(ctx)))
				}
				return nil
			},
			unlock: func(ctx context.Context) error { return errors.Join(mb.Unlock(ctx), ma.Unlock(ctx)) },
		}
	}

	var (
		mu     sync.Mutex
		turns  []acquisition
		inside atomic.Int32
		overl  atomic.Int32
	)
	errs := make([]error, 2)
	var start, wg sync.WaitGroup
	start.Add(1)
	var end time.Time
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			for time.Now().Before(end) {
				if err := j.lock(ctx); err != nil {
					errs[i] = err
					return
				}
				if inside.Add(1) != 1 {
					overl.Add(1)
				}
				mu.Lock()
				idx := len(turns)
				turns = append(turns, acquisition{who: i, locked: time.Now()})
				mu.Unlock()
				inside.Add(-1)
				err := j.unlock(ctx)
				freed := time.Now()
				mu.Lock()
				turns[idx].freed = freed
				mu.Unlock()
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	t0 := time.Now()
	end = t0.Add(env.cfg.Duration)
	start.Done()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if overl.Load() > 0 {
		return nil, fmt.Errorf("mutual exclusion violated in %d turns", overl.Load())
	}
	var handoffs []time.Duration
	counted := 0
	for i, t := range turns {
		if i > 0 && t.who != turns[i-1].who {
			handoffs = append(handoffs, t.locked.Sub(turns[i-1].freed))
		}
		if t.locked.Before(end) {
			counted++
		}
	}
	h := msAll(handoffs)
	return []Value{
		{Metric: "acquisitions/s", V: float64(counted) / env.cfg.Duration.Seconds()},
		{Metric: "handoff p50 ms", V: percentile(h, 50)},
		{Metric: "handoff p99 ms", V: percentile(h, 99)},
		{Metric: "handoffs", V: float64(len(handoffs))},
	}, nil
}
