package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// acquisition is one turn of a contender: when its Lock returned and when
// its Unlock returned.
type acquisition struct {
	who           int
	locked, freed time.Time
}

// contend runs cfg.Contenders goroutines, each with its own client and
// session as separate processes would have, that lock one name, unlock it
// at once and lock again, for cfg.Duration. It measures the handoff (the
// holder's Unlock returns → the next holder's Lock returns), acquisitions
// per second, and each contender's share.
func contend(ctx context.Context, env *env, impl Impl, name string) ([]Value, error) {
	n := env.cfg.Contenders
	mus := make([]Mutex, n)
	sessions, closeSessions, err := ownSessions(env, n)
	defer closeSessions()
	if err != nil {
		return nil, err
	}
	for i, sess := range sessions {
		m, err := impl.NewMutex(sess.Client(), sess, name, 0)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		mus[i] = m
	}

	var (
		mu     sync.Mutex
		turns  []acquisition
		inside atomic.Int32
		overl  atomic.Int32 // turns that found another holder inside
	)
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	t0 := time.Now()
	end := t0.Add(env.cfg.Duration)
	for i, m := range mus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			for time.Now().Before(end) {
				h, err := m.Lock(ctx)
				if err != nil {
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
				err = h.Unlock(ctx)
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
	t0 = time.Now()
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
	perWho := make([]int, n)
	counted := 0
	for i, t := range turns {
		if i > 0 {
			handoffs = append(handoffs, t.locked.Sub(turns[i-1].freed))
		}
		if t.locked.Before(end) {
			perWho[t.who]++
			counted++
		}
	}
	lo, hi := perWho[0], perWho[0]
	for _, c := range perWho {
		lo, hi = min(lo, c), max(hi, c)
	}
	spread := 100.0
	if lo > 0 {
		spread = 100 * float64(hi-lo) / float64(lo)
	}
	h := msAll(handoffs)
	return []Value{
		{Metric: "handoff p50 ms", V: percentile(h, 50)},
		{Metric: "handoff p99 ms", V: percentile(h, 99)},
		{Metric: "handoff max ms", V: percentile(h, 100)},
		{Metric: "acquisitions/s", V: float64(counted) / env.cfg.Duration.Seconds()},
		{Metric: "share spread %", V: spread},
	}, nil
}

// ownSessions opens n clients with a session each, as n separate processes
// would have; closeAll closes what was opened, even after an error.
func ownSessions(env *env, n int) (sessions []*concurrency.Session, closeAll func(), err error) {
	var clis []io.Closer
	closeAll = func() {
		for _, s := range sessions {
			_ = s.Close()
		}
		for _, c := range clis {
			_ = c.Close()
		}
	}
	for range n {
		cli, err := newClient(env.endpoint, nil)
		if err != nil {
			return sessions, closeAll, err
		}
		clis = append(clis, cli)
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(env.cfg.sessionTTL()))
		if err != nil {
			return sessions, closeAll, err
		}
		sessions = append(sessions, sess)
	}
	return sessions, closeAll, nil
}
