package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/session"
)

// handle is what every acquisition returns: *mutex.Lock, *election.Term,
// *semaphore.Permit, *rwmutex.Lock.
type handle interface {
	Token() fencing.Token
	Key() string
	Context() context.Context
	Txn(ctx context.Context) clientv3.Txn
}

// worker is one client, behind its own proxies, with two lanes of traffic
// that share its objects (and, for odd workers, one session.Session), so
// that one session and one object see concurrent calls.
type worker struct {
	r    *runner
	id   int
	cli  *clientv3.Client
	part *cluster.Partition

	mu      sync.Mutex
	sess    *session.Session
	objects map[string]closer // by prim/name
	guard   *fencing.EtcdGuard
	seq     int
	clock   *skewClock // the lease watchdog's clock (the clock-skew fault's)
}

type closer interface{ Close() error }

func (w *worker) client() string { return fmt.Sprintf("w%d", w.id) }

func (w *worker) nextSeq() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return w.seq
}

// object returns the worker's current object for a name, creating it (and
// the shared session) when needed.
func (w *worker) object(n NameInfo, lane int) (closer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := w.objectKey(n, lane)
	if o := w.objects[k]; o != nil {
		return o, nil
	}
	opts := append([]mutex.Option{mutex.WithNamespace(w.r.cfg.Namespace), mutex.WithTTL(w.r.cfg.TTL)}, w.r.laneMetrics()...)
	if w.clock != nil {
		opts = append(opts, w.clock.option())
	}
	if w.id%2 == 1 {
		if w.sess == nil {
			sopts := append([]session.Option{session.WithTTL(w.r.cfg.TTL)}, w.r.laneMetrics()...)
			if w.clock != nil {
				sopts = append(sopts, w.clock.option())
			}
			s, err := session.New(w.cli, sopts...)
			if err != nil {
				return nil, err
			}
			w.sess = s
		}
		opts = []mutex.Option{mutex.WithNamespace(w.r.cfg.Namespace), mutex.WithSession(w.sess)}
	}
	opts = append(append(opts, mutex.WithIdentity(fmt.Sprintf("%s.l%d", w.client(), lane))), nameOpts(n)...)
	var o closer
	var err error
	switch n.Prim {
	case "mutex":
		o, err = mutex.New(w.cli, n.Name, opts...)
	case "election":
		o, err = election.New(w.cli, n.Name, opts...)
	case "semaphore":
		o, err = semaphore.New(w.cli, n.Name, n.Limit, opts...)
	case "rwmutex":
		o, err = rwmutex.New(w.cli, n.Name, opts...)
	default:
		err = fmt.Errorf("unknown primitive %q", n.Prim)
	}
	if err != nil {
		return nil, err
	}
	w.objects[k] = o
	return o, nil
}

// objectKey names the object a lane uses for n: one object per name,
// shared by the worker's two lanes, except on every fourth worker, whose
// lanes have an object each on their shared session.
func (w *worker) objectKey(n NameInfo, lane int) string {
	k := n.Prim + "/" + n.Name
	if w.id%4 == 3 {
		k += "/" + strconv.Itoa(lane)
	}
	return k
}

// closeObject closes the worker's object for a name, if any: its holds
// end, its waiting calls return.
func (w *worker) closeObject(n NameInfo, lane int) bool {
	w.mu.Lock()
	k := w.objectKey(n, lane)
	o := w.objects[k]
	delete(w.objects, k)
	w.mu.Unlock()
	if o == nil {
		return false
	}
	start := now()
	err := o.Close()
	w.r.h.op(Op{Client: w.client(), Kind: n.Prim + ".Close", Name: n.Name, Call: start, Return: now(), Err: errString(err)})
	return true
}

// closeSession closes every object of the worker and its shared session;
// with first, the session before the objects, while they may hold.
func (w *worker) closeSession(first bool) {
	w.mu.Lock()
	objs := w.objects
	w.objects = make(map[string]closer)
	s := w.sess
	w.sess = nil
	w.mu.Unlock()
	closeSess := func() {
		if s != nil {
			start := now()
			err := s.Close()
			w.r.h.op(Op{Client: w.client(), Kind: "session.Close", Call: start, Return: now(), Err: errString(err)})
		}
	}
	if first {
		closeSess()
	}
	for _, o := range objs {
		_ = o.Close()
	}
	if !first {
		closeSess()
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// lane runs random operations until the run's traffic ends.
func (w *worker) lane(ctx context.Context, rng *rand.Rand, lane int) {
	for ctx.Err() == nil {
		// Each step's choices come from a generator of its own: how one
		// step went (etcd's timing) does not shift the next steps'.
		step := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		w.step(ctx, step, lane)
		pause(ctx, time.Duration(rng.IntN(50))*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// step is one random operation: an acquisition and, if it succeeds, a
// hold with fenced writes and a release; or a Close; or a register read.
func (w *worker) step(ctx context.Context, rng *rand.Rand, lane int) {
	names := w.r.laneNames
	n := names[rng.IntN(len(names))]
	switch p := rng.IntN(100); {
	case p < 3:
		w.closeObject(n, lane)
		return
	case p < 5 && w.id%2 == 1:
		w.closeSession(rng.IntN(2) == 0)
		return
	case p < 8:
		w.readRegister(ctx, n)
		return
	}
	o, err := w.object(n, lane)
	if err != nil {
		w.r.h.op(Op{Client: w.client(), Kind: n.Prim + ".New", Name: n.Name, Call: now(), Return: now(), Err: err.Error()})
		pause(ctx, 100*time.Millisecond)
		return
	}
	// The acquisition's context: bounded, sometimes cancelled at a random
	// moment; and sometimes the object is closed at a random moment,
	// during the wait or the hold.
	actx, cancel := context.WithTimeout(ctx, time.Duration(500+rng.IntN(6000))*time.Millisecond)
	defer cancel()
	if rng.IntN(5) == 0 {
		t := time.AfterFunc(time.Duration(rng.IntN(2000))*time.Millisecond, cancel)
		defer t.Stop()
	}
	if rng.IntN(25) == 0 {
		t := time.AfterFunc(time.Duration(rng.IntN(3000))*time.Millisecond, func() { w.closeObject(n, lane) })
		defer t.Stop()
	}
	seq := w.nextSeq()
	value := fmt.Sprintf("%s-%d", w.client(), seq)
	var kind string
	var h handle
	var release func(context.Context) error
	shared := false
	start := now()
	switch obj := o.(type) {
	case *mutex.Mutex:
		var l *mutex.Lock
		if rng.IntN(3) == 0 {
			kind = "mutex.TryLock"
			l, err = obj.TryLock(actx)
		} else {
			kind = "mutex.Lock"
			l, err = obj.Lock(actx)
		}
		if err == nil {
			h, release = l, l.Unlock
		}
	case *election.Election:
		kind = "election.Campaign"
		var t *election.Term
		t, err = obj.Campaign(actx, value)
		if err == nil {
			h, release = t, t.Resign
		}
	case *semaphore.Semaphore:
		var p *semaphore.Permit
		if rng.IntN(3) == 0 {
			kind = "semaphore.TryAcquire"
			p, err = obj.TryAcquire(actx)
		} else {
			kind = "semaphore.Acquire"
			p, err = obj.Acquire(actx)
		}
		if err == nil {
			h, release, shared = p, p.Release, true
		}
	case *rwmutex.RWMutex:
		var l *rwmutex.Lock
		switch rng.IntN(4) {
		case 0:
			kind = "rwmutex.Lock"
			l, err = obj.Lock(actx)
		case 1:
			kind = "rwmutex.TryLock"
			l, err = obj.TryLock(actx)
		case 2:
			kind = "rwmutex.RLock"
			l, err = obj.RLock(actx)
		default:
			kind = "rwmutex.TryRLock"
			l, err = obj.TryRLock(actx)
		}
		if err == nil {
			h, release, shared = l, l.Unlock, l.Shared()
		}
	}
	ret := now()
	op := Op{Client: w.client(), Kind: kind, Name: n.Name, Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		w.r.h.op(op)
		return
	}
	op.Key, op.Token = h.Key(), int64(h.Token())
	w.r.h.op(op)
	hold := &Hold{Prim: n.Prim, Name: n.Name, Client: w.client(), Key: h.Key(), Token: int64(h.Token()), Shared: shared, Acquired: ret}
	w.r.h.acquired(hold, n, h.Context().Done())
	context.AfterFunc(h.Context(), func() {
		w.r.h.ended(hold, now(), errString(context.Cause(h.Context())))
	})
	w.hold(ctx, rng, n, h, shared, value)
	if t, ok := h.(*election.Term); ok && rng.IntN(2) == 0 {
		pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := now()
		err := t.Proclaim(pctx, value+"p")
		pcancel()
		w.r.h.op(Op{Client: w.client(), Kind: "election.Proclaim", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())})
		w.hold(ctx, rng, n, h, shared, value+"p")
	}
	if rng.IntN(20) == 0 {
		return // never released: left to Close or to the end of the run
	}
	w.release(n, h, release)
}

// hold makes fenced writes while holding: etcd's evidence that the key
// acted as a holder (its Txn, guarded by its key), and for exclusive
// holds the etcd guard's register and the in-memory guard. It checks
// nothing before writing, as a paused process would not.
func (w *worker) hold(ctx context.Context, rng *rand.Rand, n NameInfo, h handle, shared bool, value string) {
	writes := 1 + rng.IntN(3)
	for i := 0; i < writes; i++ {
		w.r.evidence(w.client(), n, h)
		if !shared {
			w.r.guarded(w.id, w.client(), w.guard, n, h, fmt.Sprintf("%s.%d", value, i))
			w.r.admitMemory(w.id, n, h)
		}
		d := time.Duration(rng.IntN(300)) * time.Millisecond
		switch rng.IntN(12) {
		case 0:
			// Longer than the TTL, writing nothing meanwhile: renewals
			// must carry it, and only the watchdog can tell it of a loss.
			d = w.r.cfg.TTL + time.Duration(rng.IntN(int(w.r.cfg.TTL/time.Millisecond)))*time.Millisecond
		case 1:
			d = time.Duration(rng.IntN(int(w.r.cfg.TTL/time.Millisecond))) * time.Millisecond
		}
		pause(ctx, d)
	}
}

// release releases, again after an error other than a loss, since a
// failed release leaves the key in front of every waiter.
func (w *worker) release(n NameInfo, h handle, release func(context.Context) error) {
	for attempt := 0; attempt < 5; attempt++ {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := now()
		err := release(rctx)
		cancel()
		w.r.h.op(w.r.leaseAfter(Op{Client: w.client(), Kind: n.Prim + ".Release", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}))
		if err == nil || isLoss(err) || errors.Is(err, mutex.ErrClosed) {
			return
		}
	}
}

func isLoss(err error) bool {
	return errors.Is(err, mutex.ErrNotHeld) || errors.Is(err, election.ErrNotLeader) ||
		errors.Is(err, semaphore.ErrNotHeld) || errors.Is(err, rwmutex.ErrNotHeld)
}

func (w *worker) readRegister(ctx context.Context, n NameInfo) {
	if n.Limit != 1 {
		return
	}
	w.r.readRegister(w.id, w.cli, n)
}
