package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// The primitives comparison has no raw etcd semaphore to measure against:
// baton's rwmutex is compared with etcd's recipes RWMutex, and baton's
// semaphore with what a user of etcd builds instead, N raw concurrency
// mutexes (try each slot, else wait on one).

// PrimitivesCompared is the header of a primitives report.
const PrimitivesCompared = "baton rwmutex vs etcd recipes RWMutex; baton semaphore vs N raw concurrency mutexes"

// SemaphoreLimit is the limit of the semaphore workloads.
const SemaphoreLimit = 2

// release ends one acquisition.
type release func(ctx context.Context) error

// primImpl builds the read/write lock and the semaphore of one side.
type primImpl interface {
	Name() string
	rw(sess *concurrency.Session, name string) (rwLock, error)
	sem(sess *concurrency.Session, name string, limit, home int) (semLock, error)
}

type rwLock interface {
	rlock(ctx context.Context) (release, error)
	lock(ctx context.Context) (release, error)
	close() error
}

type semLock interface {
	acquire(ctx context.Context) (release, error)
	close() error
}

// primImpls are the two sides, baton first.
var primImpls = []primImpl{batonPrim{shared: &harness.SharedSessions{}}, rawPrim{}}

type batonPrim struct{ shared *harness.SharedSessions }

func (batonPrim) Name() string { return "baton" }

func (b batonPrim) rw(sess *concurrency.Session, name string) (rwLock, error) {
	bs, err := b.shared.Get(sess)
	if err != nil {
		return nil, err
	}
	rw, err := rwmutex.New(sess.Client(), name, rwmutex.WithNamespace(harness.Namespace), rwmutex.WithSession(bs))
	if err != nil {
		return nil, err
	}
	return batonRW{rw}, nil
}

func (b batonPrim) sem(sess *concurrency.Session, name string, limit, _ int) (semLock, error) {
	bs, err := b.shared.Get(sess)
	if err != nil {
		return nil, err
	}
	s, err := semaphore.New(sess.Client(), name, limit, semaphore.WithNamespace(harness.Namespace), semaphore.WithSession(bs))
	if err != nil {
		return nil, err
	}
	return batonSem{s}, nil
}

type batonRW struct{ rw *rwmutex.RWMutex }

func (b batonRW) rlock(ctx context.Context) (release, error) {
	l, err := b.rw.RLock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (b batonRW) lock(ctx context.Context) (release, error) {
	l, err := b.rw.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}
func (b batonRW) close() error { return b.rw.Close() }

type batonSem struct{ s *semaphore.Semaphore }

func (b batonSem) acquire(ctx context.Context) (release, error) {
	p, err := b.s.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return p.Release, nil
}
func (b batonSem) close() error { return b.s.Close() }

// rawPrim is etcd's recipes RWMutex, and N concurrency mutexes as a
// semaphore.
type rawPrim struct{}

func (rawPrim) Name() string { return "raw" }

func (rawPrim) rw(sess *concurrency.Session, name string) (rwLock, error) {
	return rawRW{sess: sess, prefix: "/" + harness.Namespace + "/recipes-rw/" + name}, nil
}

func (rawPrim) sem(sess *concurrency.Session, name string, limit, home int) (semLock, error) {
	s := rawSem{home: home % limit}
	for i := range limit {
		s.mus = append(s.mus, concurrency.NewMutex(sess, fmt.Sprintf("/%s/raw-sem/%s/slot-%d/", harness.Namespace, name, i)))
	}
	return s, nil
}

// rawRW makes a recipes RWMutex per acquisition: it keeps the key of its
// last acquisition.
type rawRW struct {
	sess   *concurrency.Session
	prefix string
}

func (r rawRW) rlock(context.Context) (release, error) {
	m := recipe.NewRWMutex(r.sess, r.prefix)
	if err := m.RLock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.RUnlock() }, nil
}

func (r rawRW) lock(context.Context) (release, error) {
	m := recipe.NewRWMutex(r.sess, r.prefix)
	if err := m.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.Unlock() }, nil
}
func (rawRW) close() error { return nil }

// rawSem tries every slot's mutex, then waits on its home slot.
type rawSem struct {
	mus  []*concurrency.Mutex
	home int
}

func (s rawSem) acquire(ctx context.Context) (release, error) {
	for _, m := range s.mus {
		err := m.TryLock(ctx)
		if err == nil {
			return m.Unlock, nil
		}
		if !errors.Is(err, concurrency.ErrLocked) {
			return nil, err
		}
	}
	m := s.mus[s.home]
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}
func (rawSem) close() error { return nil }

type primWorkload = sideWorkload[primImpl]

func primWorkloads() []primWorkload {
	return []primWorkload{
		{"rw-read-cycle", func(ctx context.Context, env *env, impl primImpl, name string) ([]Value, error) {
			return cycle(ctx, env, name, func(sess *concurrency.Session) (func(context.Context) (release, error), func() error, error) {
				rw, err := impl.rw(sess, name)
				if err != nil {
					return nil, nil, err
				}
				return rw.rlock, rw.close, nil
			})
		}},
		{"rw-write-cycle", func(ctx context.Context, env *env, impl primImpl, name string) ([]Value, error) {
			return cycle(ctx, env, name, func(sess *concurrency.Session) (func(context.Context) (release, error), func() error, error) {
				rw, err := impl.rw(sess, name)
				if err != nil {
					return nil, nil, err
				}
				return rw.lock, rw.close, nil
			})
		}},
		{"rw-writers-contend", func(ctx context.Context, env *env, impl primImpl, name string) ([]Value, error) {
			return contendPrim(ctx, env, 1, func(sess *concurrency.Session, _ int) (func(context.Context) (release, error), func() error, error) {
				rw, err := impl.rw(sess, name)
				if err != nil {
					return nil, nil, err
				}
				return rw.lock, rw.close, nil
			})
		}},
		{"sem-cycle", func(ctx context.Context, env *env, impl primImpl, name string) ([]Value, error) {
			return cycle(ctx, env, name, func(sess *concurrency.Session) (func(context.Context) (release, error), func() error, error) {
				s, err := impl.sem(sess, name, SemaphoreLimit, 0)
				if err != nil {
					return nil, nil, err
				}
				return s.acquire, s.close, nil
			})
		}},
		{"sem-contend", func(ctx context.Context, env *env, impl primImpl, name string) ([]Value, error) {
			return contendPrim(ctx, env, SemaphoreLimit, func(sess *concurrency.Session, i int) (func(context.Context) (release, error), func() error, error) {
				s, err := impl.sem(sess, name, SemaphoreLimit, i)
				if err != nil {
					return nil, nil, err
				}
				return s.acquire, s.close, nil
			})
		}},
	}
}

// PrimitiveWorkloads are the primitives workload names, in run order.
func PrimitiveWorkloads() []string {
	var out []string
	for _, w := range primWorkloads() {
		out = append(out, w.name)
	}
	return out
}

type acquirer func(sess *concurrency.Session) (acquire func(context.Context) (release, error), closeFn func() error, err error)

// cycle acquires and releases on one session, alone, for cfg.Duration:
// the latency of an uncontended acquire+release.
func cycle(ctx context.Context, env *env, _ string, mk acquirer) ([]Value, error) {
	sessions, closeSessions, err := ownSessions(env, 1)
	defer closeSessions()
	if err != nil {
		return nil, err
	}
	acquire, closeFn, err := mk(sessions[0])
	if err != nil {
		return nil, err
	}
	defer closeFn()
	var lat []time.Duration
	end := time.Now().Add(env.cfg.Duration)
	for time.Now().Before(end) {
		began := time.Now()
		rel, err := acquire(ctx)
		if err != nil {
			return nil, err
		}
		if err := rel(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(began))
	}
	l := harness.MsAll(lat)
	return []Value{
		{Metric: "acquire+release p50 ms", V: harness.Percentile(l, 50)},
		{Metric: "acquire+release p99 ms", V: harness.Percentile(l, 99)},
	}, nil
}

// contendPrim runs cfg.Contenders goroutines, each with its own client and
// session, that acquire, release at once and acquire again for
// cfg.Duration, checking that at most limit hold at once. The handoff of
// an acquisition is the time from the latest release before it returned;
// every acquisition waits, as there are more contenders than permits.
func contendPrim(ctx context.Context, env *env, limit int, mk func(sess *concurrency.Session, i int) (func(context.Context) (release, error), func() error, error)) ([]Value, error) {
	n := env.cfg.Contenders
	sessions, closeSessions, err := ownSessions(env, n)
	defer closeSessions()
	if err != nil {
		return nil, err
	}
	acquires := make([]func(context.Context) (release, error), n)
	for i, sess := range sessions {
		a, closeFn, err := mk(sess, i)
		if err != nil {
			return nil, err
		}
		defer closeFn()
		acquires[i] = a
	}
	var (
		mu        sync.Mutex
		locked    []time.Time
		freed     []time.Time
		inside    atomic.Int32
		overLimit atomic.Int32
	)
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	var end time.Time
	for i, acquire := range acquires {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			for time.Now().Before(end) {
				rel, err := acquire(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				if inside.Add(1) > int32(limit) {
					overLimit.Add(1)
				}
				mu.Lock()
				locked = append(locked, time.Now())
				mu.Unlock()
				inside.Add(-1)
				err = rel(ctx)
				mu.Lock()
				freed = append(freed, time.Now())
				mu.Unlock()
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	began := time.Now()
	end = began.Add(env.cfg.Duration)
	start.Done()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if overLimit.Load() > 0 {
		return nil, fmt.Errorf("more than %d holders at once in %d acquisitions", limit, overLimit.Load())
	}
	slices.SortFunc(freed, time.Time.Compare)
	var handoffs []time.Duration
	for _, l := range locked {
		i := sort.Search(len(freed), func(i int) bool { return freed[i].After(l) })
		if i > 0 {
			handoffs = append(handoffs, l.Sub(freed[i-1]))
		}
	}
	h := harness.MsAll(handoffs)
	return []Value{
		{Metric: "handoff p50 ms", V: harness.Percentile(h, 50)},
		{Metric: "handoff p99 ms", V: harness.Percentile(h, 99)},
		{Metric: "acquisitions/s", V: float64(len(locked)) / time.Since(began).Seconds()},
	}, nil
}

// RunPrimitives runs every primitives workload cfg.Runs times per side
// against srv, alternating which side goes first, and reports progress.
// In the report, "baton" is baton's rwmutex or semaphore and "raw" etcd's
// recipes RWMutex or N raw mutexes.
func RunPrimitives(ctx context.Context, srv *embedetcd.Server, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.Defaults()
	cli, err := harness.NewClient(srv.Endpoint(), nil)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	e := &env{cfg: cfg, endpoint: srv.Endpoint(), cli: cli, dir: srv.Dir()}
	rep := &Report{Compared: PrimitivesCompared, Started: time.Now(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), LoadBefore: harness.Loadavg(), Config: cfg}
	if err := runRounds(ctx, e, rep, primWorkloads(), primImpls, 20, progress); err != nil {
		return nil, err
	}
	rep.LoadAfter = harness.Loadavg()
	rep.Finished = time.Now()
	return rep, nil
}
