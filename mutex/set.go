package mutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/group"
	"github.com/batonhq/baton/internal/guard"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
)

// MaxSetNames is the most names one Set locks. Its keys are put in one etcd
// transaction, with one condition per key and one for the lease's fence,
// and etcd refuses a transaction with more operations or conditions than
// its --max-txn-ops flag allows: 128 by default.
const MaxSetNames = 127

// MaxSetNamesWithLockDelay is the most names of a Set with WithLockDelay:
// its Unlock deletes every key and every key's lock-delay record in one
// transaction, two operations per name.
const MaxSetNamesWithLockDelay = 64

// Set locks several names at once, under one fencing token. Lock puts one
// key in each name's queue in a single etcd transaction, so every key has
// the same CreateRevision: the returned Lock's Token fences every resource
// the names protect. Each key waits only for the older keys of its own
// queue, so two Sets locking {a, b} and {b, a} never deadlock, whatever the
// order of the names, and arrival order is kept across names. A Set and a
// Mutex of the same name wait in the same queue, so they exclude each
// other. A Set is safe for concurrent use.
type Set struct {
	names  []string
	owners []*core.Owner[*Lock]
	sess   *core.Session
	own    bool // the Set closes (or detaches) sess
	value  string
	delays []*delay.Config // one per name; nil without WithLockDelay

	closing   context.Context // ends when Close begins
	close     context.CancelCauseFunc
	calls     sync.WaitGroup // Lock calls and cleanups in flight
	mu        sync.Mutex     // guards closed
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// NewSet returns a Set of names in the configured namespace, with the
// options of New. It does not contact etcd. An empty list, a name given
// twice, more than MaxSetNames names (MaxSetNamesWithLockDelay with
// WithLockDelay), an invalid name or option are refused with an error
// wrapping ErrInvalid.
func NewSet(cli *clientv3.Client, names []string, opts ...Option) (*Set, error) {
	switch {
	case len(names) == 0:
		return nil, fmt.Errorf("%w: mutex.NewSet: names must not be empty", ErrInvalid)
	case len(names) > MaxSetNames:
		return nil, fmt.Errorf("%w: mutex.NewSet: %d names, at most %d: every key is put in one etcd transaction, and etcd allows %d operations in one by default (--max-txn-ops)",
			ErrInvalid, len(names), MaxSetNames, MaxSetNames)
	}
	seen := make(map[string]int, len(names))
	for i, name := range names {
		if err := keys.ValidateName("mutex name", name); err != nil {
			return nil, fmt.Errorf("mutex.NewSet: names[%d]: %w", i, err)
		}
		if j, dup := seen[name]; dup {
			return nil, fmt.Errorf("%w: mutex.NewSet: name %q given twice (names[%d] and names[%d])", ErrInvalid, name, j, i)
		}
		seen[name] = i
	}
	owners, sess, own, cfg, value, err := config.OpenAll[*Lock](cli, primitive(), names, opts)
	if err != nil {
		return nil, err
	}
	if cfg.LockDelay > 0 && len(names) > MaxSetNamesWithLockDelay {
		for _, o := range owners {
			_ = o.Close()
		}
		switch {
		case own && sess.IsBorrowed():
			_ = sess.Detach()
		case own:
			_ = sess.Close()
		}
		return nil, fmt.Errorf("%w: mutex.NewSet: %d names with WithLockDelay, at most %d: Unlock deletes every key and its lock-delay record in one etcd transaction (--max-txn-ops, 128 by default)",
			ErrInvalid, len(names), MaxSetNamesWithLockDelay)
	}
	s := &Set{names: append([]string(nil), names...), owners: owners, sess: sess, own: own, value: value}
	if cfg.LockDelay > 0 {
		for i, o := range owners {
			s.delays = append(s.delays, delay.New(cli, cfg.Namespace, keys.Lock, names[i], o.Prefix(), cfg.LockDelay))
		}
	}
	s.closing, s.close = context.WithCancelCause(context.Background())
	return s, nil
}

// Names returns the names the Set locks, in the order given to NewSet.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Namespace returns the Set's namespace.
func (s *Set) Namespace() string { return s.owners[0].Namespace() }

// Lock waits until it holds every name of the Set, ctx ends, or the Set is
// closed (ErrClosed), and returns one Lock for all of them: one Token, a
// Context that ends when any of the keys may be lost, and an Unlock that
// releases them all in one transaction. On error no key of this call is
// left in etcd. It costs two round trips more than a Mutex's Lock: the
// transaction that puts every key, then one confirming read per name, in
// parallel.
func (s *Set) Lock(ctx context.Context) (*Lock, error) { return s.lock(ctx, false) }

// TryLock takes every name if none is held, and returns an error wrapping
// ErrLocked at once (naming a held one) if any is.
func (s *Set) TryLock(ctx context.Context) (*Lock, error) { return s.lock(ctx, true) }

// errMoved: a key of the set was deleted before its name's acquisition
// confirmed it, so the keys no longer share one revision.
var errMoved = errors.New("a key of the set changed before it was confirmed")

func (s *Set) lock(ctx context.Context, try bool) (*Lock, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.calls.Add(1)
	s.mu.Unlock()
	defer s.calls.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.closing, func() { cancel(ErrClosed) })()
	for attempt := 0; ; attempt++ {
		l, err := s.attempt(ctx, try)
		if errors.Is(err, ErrClosed) || s.closing.Err() != nil {
			return nil, ErrClosed
		}
		if !errors.Is(err, errMoved) || attempt == 2 || ctx.Err() != nil {
			return l, err
		}
	}
}

func (s *Set) attempt(ctx context.Context, try bool) (*Lock, error) {
	cli := s.sess.Client()
	l, err := s.sess.Lease(ctx)
	if err != nil {
		return nil, s.wrap(err)
	}
	tag := rand.Uint64()
	ks := make([]string, len(s.owners))
	cmps := make([]clientv3.Cmp, len(ks), len(ks)+1)
	puts := make([]clientv3.Op, len(ks))
	for i, o := range s.owners {
		ks[i] = keys.TaggedKey(keys.LeaseKey(o.Prefix(), int64(l.ID())), keys.TagSet, tag)
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(ks[i]), "=", 0)
		puts[i] = clientv3.OpPut(ks[i], s.value, clientv3.WithLease(l.ID()))
	}
	// One transaction puts every key: they share one CreateRevision. A
	// retry after a lost reply finds them (the tag is this call's alone).
	// The lease's fence voids the puts once a cleanup raised it (queue.Fence).
	var resp *clientv3.TxnResponse
	fkey := queue.FenceKey(s.owners[0].Prefix(), l.ID())
	unheard := false // an attempt failed unanswered: it may apply later
	err = retry.Do(ctx, func(actx context.Context) (err error) {
		fence, v := l.Fence.Cmp(fkey)
		resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).If(append(cmps, fence)...).Then(puts...).Else(clientv3.OpGet(ks[0]), queue.FenceGet(fkey)).Commit()
		unheard = unheard || (err != nil && !retry.Permanent(err))
		if err == nil && !resp.Succeeded && len(resp.Responses[0].GetResponseRange().Kvs) == 0 &&
			l.Fence.Moved(fkey, v, resp.Responses[1].GetResponseRange().Kvs, resp.Header.Revision) {
			return retry.ErrAgain
		}
		return err
	})
	if err == nil && unheard && resp.Succeeded { // void the unheard attempt before the keys are used
		err = retry.Do(ctx, func(actx context.Context) error { return l.Fence.Raise(actx, cli, l.ID(), fkey) })
	}
	switch {
	case err != nil && retry.Permanent(err) && unheard:
		s.cleanup(ks, l)
		return nil, s.wrap(err)
	case err != nil && retry.Permanent(err):
		return nil, s.wrap(err) // refused as a whole: nothing was written
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.Lose(errs.ErrLeaseExpired)
		return nil, errMoved
	case err != nil:
		s.cleanup(ks, l) // the put may have applied unheard
		return nil, s.wrap(failure(ctx, err))
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			if unheard {
				s.cleanup(ks, l)
			}
			return nil, errMoved
		}
		rev = kvs[0].CreateRevision
	}

	// Each name's acquisition finds its key and waits in its own queue.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	locks := make([]*Lock, len(ks))
	var first error // the failure that cancelled the others
	var once sync.Once
	var wg sync.WaitGroup
	for i, o := range s.owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := o.Acquire(actx, core.Request{Value: s.value, Try: try, Key: ks[i], Confirms: s.delays != nil}, newLock)
			locks[i] = lk
			if err != nil {
				once.Do(func() { first = err })
				cancel(err)
			}
		}()
	}
	wg.Wait()
	err = first
	for _, lk := range locks {
		if err == nil && int64(lk.Token()) != rev {
			err = errMoved
		}
	}
	if err == nil {
		err = s.afterDelays(ctx, locks)
	}
	if err == nil {
		l := newSetLock(cli, s.names, locks)
		for i, d := range s.delays {
			l.set.records = append(l.set.records, d.RecordKey(locks[i].Key(), int64(locks[i].Token())))
		}
		return l, nil
	}
	if ctx.Err() != nil {
		err = s.wrap(context.Cause(ctx))
	}
	var left []string
	var wg2 sync.WaitGroup
	for i, lk := range locks {
		if lk == nil {
			left = append(left, ks[i])
			continue
		}
		var d *delay.Config
		if s.delays != nil {
			d = s.delays[i]
		}
		wg2.Add(1)
		go func() { defer wg2.Done(); _ = delay.Release(context.WithoutCancel(ctx), d, lk.hold, ErrNotHeld) }()
	}
	wg2.Wait()
	s.cleanup(left, nil)
	return nil, err
}

// afterDelays records every member and waits out the lock-delay of every
// name (see delay.Config.After), in parallel.
func (s *Set) afterDelays(ctx context.Context, locks []*Lock) error {
	if s.delays == nil {
		return nil
	}
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, d := range s.delays {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.After(ctx, locks[i].hold) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return s.wrap(fmt.Errorf("lock-delay: %w", err))
	}
	return nil
}

// cleanup deletes keys of a failed attempt that no acquisition took over.
// The keys are this attempt's alone, so a plain delete is safe. After an
// unheard put (unheard is its lease) it raises the lease's fence first, so
// that the put cannot land after the delete. A cleanup etcd does not
// answer goes on in the background until the lease ends or the Set is
// closed.
func (s *Set) cleanup(ks []string, unheard *core.Lease) {
	if len(ks) == 0 {
		return
	}
	dels := make([]clientv3.Op, len(ks))
	for i, k := range ks {
		dels[i] = clientv3.OpDelete(k)
	}
	del := func(ctx context.Context) error {
		return retry.Do(ctx, func(actx context.Context) error {
			if unheard != nil {
				if err := unheard.Fence.Raise(actx, s.sess.Client(), unheard.ID(), queue.FenceKey(s.owners[0].Prefix(), unheard.ID())); err != nil {
					return err
				}
			}
			_, err := s.sess.Client().Txn(clientv3.WithRequireLeader(actx)).Then(dels...).Commit()
			return err
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), retry.AttemptTimeout)
	err := del(ctx)
	cancel()
	if err == nil || retry.Permanent(err) || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // Close's lease revoke, or the lease's end, takes them
	}
	s.calls.Add(1)
	go func() {
		defer s.calls.Done()
		ctx, cancel := context.WithTimeout(s.closing, 10*retry.AttemptTimeout)
		defer cancel()
		_ = del(ctx)
	}()
}

func (s *Set) wrap(err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("mutex set %q: %w", s.names, err)
}

// failure prefers why ctx ended over the request error it caused.
func failure(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Close releases every lock the Set holds, makes waiting and later Lock
// calls return ErrClosed, closes the lease it created (a shared session is
// left open), waits for every goroutine it started, and is idempotent.
func (s *Set) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.close(ErrClosed)
		var wg sync.WaitGroup
		errs := make([]error, len(s.owners))
		for i, o := range s.owners {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = o.Close() }()
		}
		wg.Wait()
		s.calls.Wait()
		switch {
		case s.own && s.sess.IsBorrowed():
			errs = append(errs, s.sess.Detach())
		case s.own:
			errs = append(errs, s.sess.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// setLock is what a Lock of a Set has beyond its first member's hold.
type setLock struct {
	cli   *clientv3.Client
	names []string
	locks []*Lock // one per name, in the Set's order
	// records are the lock-delay records released with the keys.
	records []string
	delay   *delay.Config // a lone Mutex Lock's lock-delay (locks is nil)
	ctx     context.Context
	cancel  context.CancelCauseFunc

	mu     sync.Mutex // guards what follows
	done   bool       // the release reached etcd
	result error
}

func newSetLock(cli *clientv3.Client, names []string, locks []*Lock) *Lock {
	s := &setLock{cli: cli, names: names, locks: locks}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for _, m := range locks {
		core.OnEnd(m.hold, s.cancel) // in the step that ends the member's: not a goroutine later
	}
	return &Lock{hold: locks[0].hold, set: s}
}

// compares are the comparisons that hold while every key is held.
func (s *setLock) compares() []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, len(s.locks))
	for i, m := range s.locks {
		cmps[i] = m.hold.IsOwner()
	}
	return cmps
}

// unlock deletes every key (and lock-delay record) in one transaction
// guarded by all of them; see group.Release.
func (s *setLock) unlock(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return s.result
	}
	holds := make([]*core.Hold, len(s.locks))
	for i, m := range s.locks {
		holds[i] = m.hold
	}
	s.cancel(ErrReleased) // before the release is sent, as a Mutex's Lock
	err := group.Release(ctx, s.cli, holds, ErrNotHeld, s.records...)
	if err == nil || errors.Is(err, ErrNotHeld) {
		s.done, s.result = true, err
	}
	return err
}

// txn is a transaction guarded by every key of the set lock.
func (s *setLock) txn(ctx context.Context) clientv3.Txn {
	return &guard.Txn{Ctx: ctx, KV: s.cli, Guard: s.compares,
		Check: func() error {
			if s.ctx.Err() != nil {
				return fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(s.ctx))
			}
			return nil
		},
		Rejected: func() error {
			// Each member's own guarded (empty) transaction ends the ones lost.
			var wg sync.WaitGroup
			for _, m := range s.locks {
				wg.Add(1)
				go func() { defer wg.Done(); _, _ = m.hold.Txn(ctx).Commit() }()
			}
			wg.Wait()
			return fmt.Errorf("%w: fenced transaction rejected: %w", ErrNotHeld, context.Cause(s.ctx))
		}}
}
