package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/mutex"
)

// acquisition is one turn of a contender: when its Lock returned and when
// its Unlock returned.
type acquisition struct {
	who           int
	locked, freed time.Time
}

// turnJob is how one contender takes its turn and ends it.
type turnJob struct {
	lock   func(ctx context.Context) error
	unlock func(ctx context.Context) error
}

// takeTurns runs one goroutine per job, all started at once, each taking
// its turn and ending it at once, again and again until d has passed:
// every turn in the order taken, and when d ended. Two holders at once is
// an error.
func takeTurns(ctx context.Context, d time.Duration, jobs []turnJob) ([]acquisition, time.Time, error) {
	var (
		mu     sync.Mutex
		turns  []acquisition
		inside atomic.Int32
		overl  atomic.Int32 // turns that found another holder inside
	)
	errs := make([]error, len(jobs))
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
	end = time.Now().Add(d)
	start.Done()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, end, err
	}
	if overl.Load() > 0 {
		return nil, end, fmt.Errorf("mutual exclusion violated in %d turns", overl.Load())
	}
	return turns, end, nil
}

// contend runs cfg.Contenders goroutines, each with its own client and
// session as separate processes would have, that lock one name, unlock it
// at once and lock again, for cfg.Duration. It measures the handoff (the
// holder's Unlock returns → the next holder's Lock returns), acquisitions
// per second, and each contender's share.
func contend(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	n := env.cfg.Contenders
	mus := make([]harness.Mutex, n)
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

	jobs := make([]turnJob, n)
	for i, m := range mus {
		var h harness.Held
		jobs[i] = turnJob{
			lock:   func(ctx context.Context) (err error) { h, err = m.Lock(ctx); return err },
			unlock: func(ctx context.Context) error { return h.Unlock(ctx) },
		}
	}
	turns, end, err := takeTurns(ctx, env.cfg.Duration, jobs)
	if err != nil {
		return nil, err
	}

	var handoffs, unlocks []time.Duration
	perWho := make([]int, n)
	counted := 0
	for i, t := range turns {
		if i > 0 {
			handoffs = append(handoffs, t.locked.Sub(turns[i-1].freed))
		}
		unlocks = append(unlocks, t.freed.Sub(t.locked))
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
	floor, err := contendFloor(ctx, env, name)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	lockFloor, err := contendLockFloor(ctx, env, name)
	if err != nil {
		return nil, fmt.Errorf("lock floor: %w", err)
	}
	h := harness.MsAll(handoffs)
	return []Value{
		{Metric: "unlock p50 ms", V: harness.Percentile(harness.MsAll(unlocks), 50)},
		{Metric: "handoff p50 ms", V: harness.Percentile(h, 50)},
		{Metric: "handoff p99 ms", V: harness.Percentile(h, 99)},
		{Metric: "handoff max ms", V: harness.Percentile(h, 100)},
		{Metric: "acquisitions/s", V: float64(counted) / env.cfg.Duration.Seconds()},
		{Metric: "floor turns/s", V: floor},
		{Metric: "% of the floor", V: 100 * float64(counted) / env.cfg.Duration.Seconds() / floor},
		{Metric: "lock floor turns/s", V: lockFloor},
		{Metric: "% of the lock floor", V: 100 * float64(counted) / env.cfg.Duration.Seconds() / lockFloor},
		{Metric: "share spread %", V: spread},
	}, nil
}

// lockDelay is the lock-delay of contend-lock-delay's baton column.
const lockDelay = 3 * time.Second

// contendLockDelay is contend with every mutex given WithLockDelay in the
// baton column and baton without one in the raw column: a clean Unlock
// must hand over as fast with a lock-delay as without.
func contendLockDelay(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	b := harness.Impls[0].(harness.Baton)
	if impl.Name() == b.Name() {
		b = b.With(mutex.WithLockDelay(lockDelay))
	}
	return contend(ctx, env, b, name)
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
		cli, err := harness.NewClient(env.endpoint, nil)
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

// contendFloor measures, on the same server, what etcd allows a handoff
// among cfg.Contenders clients whatever the library: a turn passes with
// the requests a handoff cannot do without. The holder's release is a
// write, the next client hears it on a watch it set up beforehand and
// confirms with a serializable read, then releases in turn; the client
// that released writes once more off the path, as a contender re-queues.
// It returns turns per second: the ceiling for acquisitions per second.
func contendFloor(ctx context.Context, env *env, name string) (float64, error) {
	n := env.cfg.Contenders
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	turn := "/bench-floor/" + name + "/turn"
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		cli, err := harness.NewClient(env.endpoint, nil)
		if err != nil {
			return 0, err
		}
		defer cli.Close()
		clis[i] = cli
	}
	var (
		wg    sync.WaitGroup
		turns atomic.Int64
		stop  atomic.Bool
	)
	errs := make([]error, n)
	ready := make(chan struct{}, n)
	for i, cli := range clis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me, next := strconv.Itoa(i), strconv.Itoa((i+1)%n)
			own := fmt.Sprintf("/bench-floor/%s/queue/%d", name, i)
			wch := cli.Watch(ctx, turn, clientv3.WithCreatedNotify())
			<-wch // created: no turn is missed from here on
			ready <- struct{}{}
			for wr := range wch {
				for _, ev := range wr.Events {
					if string(ev.Kv.Value) != me || stop.Load() {
						continue
					}
					if _, err := cli.Get(ctx, turn, clientv3.WithSerializable()); err != nil {
						errs[i] = err
						return
					}
					turns.Add(1)
					if _, err := cli.Put(ctx, turn, next); err != nil {
						errs[i] = err
						return
					}
					if _, err := cli.Put(ctx, own, next); err != nil {
						errs[i] = err
						return
					}
				}
			}
		}()
	}
	for range n {
		<-ready
	}
	start := time.Now()
	if _, err := env.cli.Put(ctx, turn, "0"); err != nil {
		return 0, err
	}
	if err := pause(ctx, env.cfg.Duration); err != nil {
		return 0, err
	}
	stop.Store(true)
	got := turns.Load()
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if _, err := env.cli.Delete(context.Background(), "/bench-floor/"+name+"/", clientv3.WithPrefix()); err != nil {
		return 0, err
	}
	if err := errors.Join(errs...); err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	return float64(got) / elapsed.Seconds(), nil
}

// contendLockFloor measures, on the same server, the turns per second of
// the least a lock queue on etcd does that keeps two promises the floor's
// plain puts cannot: a release deletes only its own key, and an enqueue
// never overwrites another's. cfg.Contenders clients, each with a lease of
// its own, use etcd directly, with none of baton's bookkeeping: one
// transaction puts the client's key if absent (comparing the version of a
// fence key too, as an enqueue that may be retried must) and reads the
// newest keys; a prefix watch of deletions, started before, tells when the
// key just ahead goes; a serializable read of the own key confirms; a
// delete guarded by the key's CreateRevision releases. These are baton's
// requests, one for one, and the ceiling for its acquisitions per second.
func contendLockFloor(ctx context.Context, env *env, name string) (float64, error) {
	n := env.cfg.Contenders
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prefix := "/bench-lock-floor/" + name + "/"
	sessions, closeSessions, err := ownSessions(env, n)
	defer closeSessions()
	if err != nil {
		return 0, err
	}
	host, _ := os.Hostname()
	value := fmt.Sprintf("%s:%d", host, os.Getpid()) // as baton's default identity
	var (
		wg    sync.WaitGroup
		turns atomic.Int64
		stop  atomic.Bool
	)
	errs := make([]error, n)
	ready, start := make(chan struct{}, n), make(chan struct{})
	for i, sess := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = lockFloorContender(ctx, sess, prefix, value, ready, start, &turns, &stop); errs[i] != nil {
				cancel()
			}
		}()
	}
	for range n {
		select {
		case <-ready:
		case <-ctx.Done():
		}
	}
	t0 := time.Now()
	close(start)
	_ = pause(ctx, env.cfg.Duration) // ended early by a contender's error, told below
	stop.Store(true)
	got := turns.Load()
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	if _, err := env.cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
		return 0, err
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return 0, err
		}
	}
	return float64(got) / elapsed.Seconds(), nil
}

// lockFloorContender is one client of contendLockFloor: it locks and
// unlocks until stop, counting its acquisitions in turns.
func lockFloorContender(ctx context.Context, sess *concurrency.Session, prefix, value string, ready, start chan struct{}, turns *atomic.Int64, stop *atomic.Bool) error {
	cli, lease := sess.Client(), sess.Lease()
	key := fmt.Sprintf("%s%x", prefix, lease)
	fence := fmt.Sprintf("/bench-lock-floor-session/%x", lease)
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	<-wch // created: no deletion is missed from here on
	ready <- struct{}{}
	select {
	case <-start:
	case <-ctx.Done():
		return ctx.Err()
	}
	for !stop.Load() {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.Version(fence), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(lease)), queue.Read(prefix, nil, true)).Commit()
		switch {
		case err != nil:
			return err
		case !resp.Succeeded:
			return fmt.Errorf("enqueue of %s refused", key)
		}
		rev := resp.Header.Revision
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 1 {
			// Keys leave this queue in order: the one just ahead going
			// means every one ahead went.
			if err := waitDeleted(wch, string(kvs[1].Key), rev); err != nil {
				return err
			}
			if _, err := cli.Get(ctx, key, clientv3.WithKeysOnly(), clientv3.WithSerializable()); err != nil {
				return err
			}
		}
		turns.Add(1)
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			return err
		}
	}
	return nil
}

// waitDeleted reads wch until it delivers the deletion of key after rev.
func waitDeleted(wch clientv3.WatchChan, key string, rev int64) error {
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE && string(ev.Kv.Key) == key && ev.Kv.ModRevision > rev {
				return nil
			}
		}
	}
	return context.Canceled
}
