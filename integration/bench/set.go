package bench

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/mutex"
)

// setPair runs two jobs that each lock two names, "a" and "b", in a loop:
// one asks for {a, b}, the other for {b, a}. baton takes each pair with
// one mutex.Set (one transaction, one token, no lock order to agree on);
// raw takes two etcd concurrency Mutexes one after the other, in one
// agreed order (a, then b), the way one must to avoid a deadlock with
// them. It measures acquisitions of the pair per second and the handoff
// (one job's release returns → the other's acquisition returns).
func setPair(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	sessions, closeSessions, err := ownSessions(env, 2)
	defer closeSessions()
	if err != nil {
		return nil, err
	}
	a, b := name+"-a", name+"-b"
	jobs := make([]turnJob, 2)
	for i, sess := range sessions {
		if impl.Name() == "baton" {
			names := []string{a, b}
			if i == 1 {
				names = []string{b, a}
			}
			s, err := mutex.NewSet(sess.Client(), names, mutex.WithNamespace(harness.Namespace), mutex.WithSession(sess))
			if err != nil {
				return nil, err
			}
			defer s.Close()
			var l *mutex.Lock
			jobs[i] = turnJob{
				lock:   func(ctx context.Context) (err error) { l, err = s.Lock(ctx); return err },
				unlock: func(ctx context.Context) error { return l.Unlock(ctx) },
			}
			continue
		}
		ma := concurrency.NewMutex(sess, "/"+harness.Namespace+"/v1/lock/"+a)
		mb := concurrency.NewMutex(sess, "/"+harness.Namespace+"/v1/lock/"+b)
		jobs[i] = turnJob{
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

	turns, end, err := takeTurns(ctx, env.cfg.Duration, jobs)
	if err != nil {
		return nil, err
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
	h := harness.MsAll(handoffs)
	return []Value{
		{Metric: "acquisitions/s", V: float64(counted) / env.cfg.Duration.Seconds()},
		{Metric: "handoff p50 ms", V: harness.Percentile(h, 50)},
		{Metric: "handoff p99 ms", V: harness.Percentile(h, 99)},
		{Metric: "handoffs", V: float64(len(handoffs))},
	}, nil
}
