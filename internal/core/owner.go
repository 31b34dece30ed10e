package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/inflight"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
	"github.com/batonhq/baton/internal/watch"
)

const (
	releaseTimeout = 5 * time.Second       // bounds a release whose caller's ctx has ended
	cleanupWait    = 80 * time.Millisecond // a failed acquisition's wait for its key's deletion
)

var errBusy = errors.New("held by another contender") // a try found another owner

// OwnerConfig configures an Owner; its Recorder names the primitive
// (Name, Namespace, Label) and records it.
type OwnerConfig struct {
	metrics.Recorder
	Prefix string
	// NotHeld wraps a handle's loss; Busy a try that found another owner.
	NotHeld, Busy error
	// Own says the Owner made its session (it closes or detaches it).
	Own bool
	// Untraced keeps the Owner's acquisitions out of traces (an election's
	// candidate records, a detail of its Campaign's own span).
	Untraced bool
}

// Request is one acquisition. Tag gives it a key of its own
// (keys.TaggedKey), so one lease holds several; Check runs first.
type Request struct {
	Value  string
	Try    bool
	Tag    string
	Policy Policy // nil: the oldest key alone holds
	Check  func(context.Context) error
	Key    string         // a key the caller put already (mutex.Set's), else the lease's
	Limit  int            // a semaphore's, for its spans
	If     []clientv3.Cmp // more conditions of the put; failing with no key: the try's busy error
	// Confirms: the caller writes under the key's guard as soon as it
	// holds (a lock-delay's record), a round trip that refuses a gone key:
	// the acquisition needs no read of its own before it returns.
	Confirms bool
	wait     telemetry.Wait // the call's span, set by Acquire
}

// Policy decides when a non-exclusive key may hold (queue.Policy).
type Policy = queue.Policy

// Mover lets a waiting key that a hand-over skipped wait on (an election's
// Transfer past the next candidate).
type Mover interface {
	// Moved: if key (created at rev), found gone, was skipped, it puts it
	// again at the queue's end and returns its new CreateRevision.
	Moved(ctx context.Context, key, value string, rev int64) (int64, bool)
	Unmark(key string, rev int64) []clientv3.Op // deletes a skip's mark with a failed wait's key
}

// Owner is one primitive on a session: its handles (T), its calls in
// flight, and Close, after which no goroutine of it runs.
type Owner[T any] struct {
	sess  *Session
	cfg   OwnerConfig
	unsub func()
	done  func() // ends this owner's use of its metric series
	mover Mover  // nil: no hand-over moves a waiting key

	closeErr  error
	calls     inflight.Calls // acquisitions and observers, cancelled when Close begins
	bg        sync.WaitGroup // loss refinements
	closeOnce sync.Once
	mu        sync.Mutex // guards what follows
	bgClosed  bool
	held      []held[T]
}

type held[T any] struct {
	h *Hold
	t T
}

// NewOwner returns an Owner on sess.
func NewOwner[T any](sess *Session, cfg OwnerConfig) *Owner[T] {
	o := &Owner[T]{sess: sess, cfg: cfg, done: cfg.Metrics.Use(cfg.Namespace, cfg.Label)}
	if fn := cfg.Metrics.RenewalFailed(cfg.Namespace, cfg.Label); fn != nil {
		o.unsub = sess.OnRenewalFailure(fn)
	}
	return o
}

func (o *Owner[T]) config() *OwnerConfig { return &o.cfg }

// SetMover makes o's waits movable by m; before o is used.
func (o *Owner[T]) SetMover(m Mover) { o.mover = m }

// Client is the etcd client of the owner's session.
func (o *Owner[T]) Client() *clientv3.Client { return o.sess.cli }

// Acquire returns the handle wrap makes once req's key holds, or an error
// (cfg.Busy for a try, errs.ErrClosed after Close) leaving no key behind.
func (o *Owner[T]) Acquire(ctx context.Context, req Request, wrap func(*Hold) T) (T, error) {
	start := time.Now()
	tracer := o.sess.tracer
	if o.cfg.Untraced {
		tracer = nil
	}
	ctx, req.wait = telemetry.For(tracer, metrics.KindNames[o.cfg.Kind], o.cfg.Namespace, o.cfg.Name, req.Limit, req.Tag == keys.TagRead).StartWait(ctx)
	h, t, err := o.acquire(ctx, req, wrap)
	result, outcome := "acquired", telemetry.Acquired
	switch {
	case err == nil:
	case errors.Is(err, errBusy):
		err, result, outcome = fmt.Errorf("%w: %q", o.cfg.Busy, o.cfg.Name), "locked", telemetry.Busy
	case ctx.Err() != nil || errors.Is(err, errs.ErrClosed):
		result, outcome = "canceled", telemetry.Cancelled
	case retry.Permanent(err):
		result, outcome = "error", telemetry.Refused
	case errors.Is(err, errs.ErrLost):
		result, outcome = "error", telemetry.Lost
	default:
		result, outcome = "error", telemetry.Failed
	}
	if err != nil {
		req.wait.End(outcome, err) // an acquisition ended it as its hold began
	}
	o.cfg.Acquired(result, time.Since(start), h.logFields, req.wait.SpanContext())
	return t, err
}

func (o *Owner[T]) acquire(ctx context.Context, req Request, wrap func(*Hold) T) (*Hold, T, error) {
	var zero T
	ctx, exit, ok := o.calls.Enter(ctx, errs.ErrClosed) // Close ends ctx with ErrClosed
	if !ok {
		return nil, zero, errs.ErrClosed
	}
	defer exit()
	if req.Check != nil {
		if err := req.Check(ctx); err != nil {
			return nil, zero, o.wrapErr(err)
		}
	}
	l, err := o.sess.Lease(ctx)
	if err != nil {
		return nil, zero, o.wrapErr(err)
	}
	h, err := o.queue(ctx, l, req)
	if err != nil {
		return nil, zero, o.wrapErr(err)
	}
	t := wrap(h)
	callKey(o.sess.cfg.Hooks.BeforeArm, h.key)
	h.arm() // before Held can return it: a release needs an armed hold
	o.mu.Lock()
	closed := o.calls.Closed()
	if !closed {
		o.held = append(o.held, held[T]{h, t})
	}
	o.mu.Unlock()
	if closed {
		_ = h.deleteGuarded(context.Background())
		return nil, zero, errs.ErrClosed
	}
	return h, t, nil
}

var seq atomic.Uint64 // makes each tagged key unique in this process

// queue puts the caller's key under the prefix and returns a hold once the
// key may hold. A waiter watches the key just ahead of its own (or, with a
// Policy, the queue's deletions), so a release wakes one mutex waiter.
func (o *Owner[T]) queue(ctx context.Context, l *Lease, req Request) (*Hold, error) {
	s, prefix := o.sess, o.cfg.Prefix
	key := cmp.Or(req.Key, keys.LeaseKey(prefix, int64(l.ID())))
	if req.Tag != "" {
		key = keys.TaggedKey(key, req.Tag, seq.Add(1))
	}
	res, err := s.reserve(ctx, key, req.Try, o.cfg.Kind == metrics.Election)
	if errors.Is(err, errReserved) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	w := s.watcher(key)
	w.Expect(key)
	// fail deletes the key (rev 0: unknown, rev < 0: none written).
	fail := func(rev int64, err error) (*Hold, error) {
		w.Unexpect(key)
		switch {
		case rev < 0:
			s.free(res, nil)
		case o.mover != nil:
			// A hand-over may have skipped the key just now: its mark goes too.
			o.deleteKey(l, key, rev, res, func(rev int64) []clientv3.Op { return o.mover.Unmark(key, rev) })
		default:
			o.deleteKey(l, key, rev, res, nil)
		}
		return nil, err
	}

	var stale *etcdserverpb.RangeResponse
	if planted.On("c") && o.cfg.Kind == metrics.Semaphore {
		stale = queue.PlantedStaleRead(ctx, s.cli, prefix)
	}
	resp, unheard, err := queue.Enqueue(ctx, s.cli, s.enq, &l.Fence, l.Fence.Key(prefix, l.ID()), l.ID(), key, req.Value, prefix, req.Policy, req.If)
	none := int64(-1) // a refusal wrote nothing, unless an earlier attempt went unheard
	if unheard {
		none = 0
	}
	switch {
	case err != nil && retry.Permanent(err):
		return fail(none, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.Lose(errs.ErrLeaseExpired)
		return fail(-1, errs.Lost(errs.ErrLeaseExpired))
	case errors.Is(err, queue.ErrNotSent):
		return fail(none, errs.ErrClosed)
	case err != nil:
		return fail(0, failure(ctx, err)) // the put may have applied unheard
	}
	rev, at := resp.Header.Revision, resp.Header.Revision
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			return fail(none, errBusy) // req.If failed
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		rev = kv.CreateRevision
		if string(kv.Value) != req.Value { // an adopted key carries this caller's value
			if err := o.adopt(ctx, l, key, rev, req.Value); err != nil {
				return fail(rev, failure(ctx, err))
			}
		}
	}
	read := cmp.Or(stale, resp.Responses[1].GetResponseRange())
	if req.wait.Recording() && resp.Succeeded {
		req.wait.Enqueued(queue.Position(req.Policy, resp.Responses[1].GetResponseRange(), rev))
	}
	ok, blockers, allowed, complete := queue.MayHold(req.Policy, read, resp.Succeeded, key, rev)
	if !ok {
		if req.Try {
			return fail(rev, errBusy)
		}
		callKey(s.cfg.Hooks.BeforeWait, key)
		at, err = o.wait(ctx, l, w, key, &rev, req, blockers, allowed, complete, at)
		if errors.Is(err, queue.ErrOwnKeyGone) {
			w.Unexpect(key)
			s.free(res, nil)
			return nil, o.lostReason(ctx, l)
		}
		if err != nil {
			return fail(rev, err)
		}
	}
	callKey(s.cfg.Hooks.AfterConfirm, key)
	h := newHold(o, l, key, rev, at, res, w, req.wait, ok && resp.Succeeded && read.Count == 1)
	w.Register(h)
	return h, nil
}

// adopt writes value to our existing key, guarded by its CreateRevision.
func (o *Owner[T]) adopt(ctx context.Context, l *Lease, key string, rev int64, value string) error {
	return retry.Do(ctx, func(actx context.Context) error {
		r, err := o.sess.cli.Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(l.ID()))).Commit()
		if err == nil && !r.Succeeded {
			return queue.ErrOwnKeyGone
		}
		return err
	})
}

// wait blocks until key (created at rev) may hold and returns the revision
// that showed it, or the lease's loss. When blockers are every key ahead
// (complete), their deletions show it; else it reads again after one,
// serializably (any state after it will do: no older key can appear).
func (o *Owner[T]) wait(ctx context.Context, l *Lease, w *watch.Watcher[*Hold], key string, revp *int64, req Request, blockers []*mvccpb.KeyValue, allowed int, complete bool, read int64) (int64, error) {
	p := req.Policy
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })()
	minRev := int64(0) // 0: read linearizably
	reread := false    // blockers come from ReadAhead, not from the enqueue
	rev := *revp
	// moved: a key gone while waiting that a hand-over moved waits on; a
	// wait that ends meanwhile ends with ctx's cause, not with a loss.
	moved := func(errp *error) bool {
		if !errors.Is(*errp, queue.ErrOwnKeyGone) || o.mover == nil {
			return false
		}
		nr, ok := o.mover.Moved(ctx, key, req.Value, rev)
		switch {
		case ok:
			callKey(o.sess.cfg.Hooks.Moved, key)
			rev, *revp, blockers, minRev = nr, nr, nil, 0
		case ctx.Err() != nil:
			*errp = context.Cause(ctx)
		}
		return ok
	}
	for {
		if blockers == nil {
			resp, err := queue.ReadAhead(ctx, o.sess.cli, o.cfg.Prefix, key, rev, p, minRev)
			if err != nil {
				return 0, failure(ctx, err)
			}
			own := resp.Responses[1].GetResponseRange().Kvs
			if minRev > 0 && (resp.Header.Revision < minRev || len(own) == 0) {
				minRev = 0 // a member behind the deletion, or our key's: ask the leader
				continue
			}
			// Planted bug i's other half (Moved returns the old revision): our key
			// taken at the revision read, or the check below heals the bug.
			if planted.On("i") && o.mover != nil && len(own) == 1 && own[0].CreateRevision > rev {
				rev, *revp = own[0].CreateRevision, own[0].CreateRevision
			}
			if len(own) == 0 || own[0].CreateRevision != rev {
				err := queue.ErrOwnKeyGone
				if moved(&err) {
					continue
				}
				return 0, err
			}
			read, reread = resp.Header.Revision, true
			callKey(o.sess.cfg.Hooks.ReadAhead, key)
			blockers, allowed, complete = resp.Responses[0].GetResponseRange().Kvs, 0, p != nil
			if p != nil {
				blockers, allowed = p.Blockers(key, blockers)
			}
			if len(blockers) <= allowed {
				return read, nil
			}
		}
		// After a read of the queue a mutex waits for the key just ahead
		// alone: holding on its release alone, that release is read, not
		// taken from the namespace watch (a range delete or a revoke can
		// delete one key and a mark there, and the holder would stay).
		at, done, released, err := queue.WaitGone(ctx, o.sess.cli, w, o.cfg.Prefix, key, p != nil, blockers, allowed, read, reread && p == nil && o.cfg.Kind == metrics.Mutex)
		switch {
		case moved(&err):
			continue
		case err != nil:
			return 0, err
		case released && p == nil && o.cfg.Kind == metrics.Mutex:
			// The key just ahead went with its holder's release: it was the
			// oldest, and no older key can appear; no read of the queue,
			// however long (a forged mark, docs/security.md, is not excluded).
			return at, nil
		case done && complete && (released || req.Confirms && o.mover == nil):
			// Every key ahead was followed: the events confirm. A movable wait
			// reads its own key: a watch of the key ahead does not see it go.
			return at, nil
		case done && complete:
			err := queue.Confirm(ctx, o.sess.cli, key, rev, at)
			if moved(&err) {
				continue
			}
			if err != nil && !errors.Is(err, queue.ErrOwnKeyGone) {
				err = failure(ctx, err)
			}
			return at, err
		}
		blockers, minRev = nil, at
	}
}

// lostReason says why our key vanished while waiting.
func (o *Owner[T]) lostReason(ctx context.Context, l *Lease) error {
	if l.Context().Err() != nil {
		return context.Cause(l.Context())
	}
	if l.Gone(context.WithoutCancel(ctx)) {
		l.Lose(errs.ErrLeaseExpired)
		return errs.Lost(errs.ErrLeaseExpired)
	}
	return errs.Lost(errs.ErrKeyDeleted)
}

// failure prefers why ctx ended over the request error it caused.
func failure(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// deleteKey deletes key, guarded by its CreateRevision (rev 0: an unheard
// put, voided by raising the lease's fence), with also's ops, then frees
// it; after cleanupWait it goes on in the background.
func (o *Owner[T]) deleteKey(l *Lease, key string, rev int64, r *reservation, also func(rev int64) []clientv3.Op) {
	s := o.sess
	stop := l.Context()
	if s.etcd != nil {
		stop = s.etcd.Ctx()
	}
	done := make(chan struct{})
	run := func() {
		defer close(done)
		callKey(s.cfg.Hooks.BeforeCleanup, key)
		var err error
		if rev == 0 && !planted.On("w") {
			err = retry.Do(stop, func(ctx context.Context) error {
				return l.Fence.Raise(ctx, s.cli, l.ID(), queue.FenceKey(o.cfg.Prefix, l.ID()))
			})
		}
		if err == nil {
			err = retry.Do(stop, func(ctx context.Context) error { return queue.DeleteOnce(ctx, s.cli, l.ID(), key, &rev, also) })
		}
		if err != nil && retry.Permanent(err) {
			s.cfg.Logger.Error("cannot delete a key of this process; it stays until its lease ends", zap.String("key", key), zap.Error(err))
		}
		s.free(r, nil) // deleted, refused for good, or gone with its lease
	}
	if !s.goIn(&s.dels, run) {
		if s.etcd == nil {
			s.free(r, nil) // Close revokes the lease with its keys
			return
		}
		go run() // bounded by the caller's lease
	}
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// ReleaseContext is the ctx a release runs with: ctx, without its
// cancellation if it has ended, bounded by releaseTimeout if it has no
// deadline. cancel frees it.
func ReleaseContext(ctx context.Context) (_ context.Context, cancel context.CancelFunc) {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	if _, ok := ctx.Deadline(); !ok {
		return context.WithTimeout(ctx, releaseTimeout)
	}
	return ctx, func() {}
}

// release is a handle's Unlock, Resign or Release, with a fresh bounded
// ctx if the caller's ended.
func (o *Owner[T]) release(ctx context.Context, h *Hold) error {
	ctx, cancel := ReleaseContext(ctx)
	defer cancel()
	ctx, span := h.span().StartRelease(ctx)
	err := h.deleteGuarded(ctx)
	if err == nil || errors.Is(err, o.cfg.NotHeld) { // no retry is due: forget h
		o.mu.Lock()
		o.held = slices.DeleteFunc(o.held, func(e held[T]) bool { return e.h == h })
		o.mu.Unlock()
	}
	span.End(err)
	return err
}

// started and ended are a hold's start and end in metrics and logs.
func (o *Owner[T]) started(*Hold) { o.cfg.Started() }

func (o *Owner[T]) ended(h *Hold, cause error, held time.Duration) {
	span := h.span()
	if errors.Is(cause, errs.ErrReleased) {
		span.Released()
	} else {
		span.Lost(errs.Reason(cause), cause)
	}
	o.cfg.Ended(cause, held, h.logFields, span.SpanContext())
}

// Go runs fn in a goroutine Close ends and waits for; false after Close.
func (o *Owner[T]) Go(ctx context.Context, fn func(ctx context.Context)) bool {
	ctx, exit, ok := o.calls.Enter(ctx, errs.ErrClosed) // Close ends ctx with ErrClosed
	if ok {
		go func() { defer exit(); fn(ctx) }()
	}
	return ok
}

// goBG runs fn in a goroutine Close waits for; false once closing.
func (o *Owner[T]) goBG(fn func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bgClosed {
		return false
	}
	o.bg.Add(1)
	go func() { defer o.bg.Done(); fn() }()
	return true
}

// wrapErr names the primitive in an error; ErrClosed and busy stay bare.
func (o *Owner[T]) wrapErr(err error) error {
	switch {
	case o.calls.Closed(), errors.Is(err, errs.ErrClosed):
		return errs.ErrClosed
	case errors.Is(err, errBusy):
		return err
	}
	return fmt.Errorf("%s %q: %w", metrics.KindNames[o.cfg.Kind], o.cfg.Name, err)
}

// Held returns the handles held, oldest token first.
func (o *Owner[T]) Held() []T {
	o.mu.Lock()
	pairs := slices.Clone(o.held)
	o.mu.Unlock()
	slices.SortFunc(pairs, func(a, b held[T]) int { return cmp.Compare(a.h.rev, b.h.rev) })
	out := make([]T, len(pairs))
	for i, p := range pairs {
		out[i] = p.t
	}
	return out
}

// Close ends calls in flight and holds (revoking its own granted lease, or
// deleting the keys within one bound, the rest left to the session), closes
// or detaches its own session, and waits for its goroutines. Idempotent.
func (o *Owner[T]) Close() error {
	o.closeOnce.Do(func() { o.closeErr = o.close() })
	return o.closeErr
}

func (o *Owner[T]) close() error {
	o.calls.Close(errs.ErrClosed, o.sess.cfg.Hooks.InClose)

	o.mu.Lock()
	holds := o.held
	o.held = nil
	o.mu.Unlock()
	revoke := o.cfg.Own && !o.sess.IsBorrowed()
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	var out []error
	for _, e := range holds {
		if revoke {
			e.h.abandon() // the revoke below deletes the key
		} else if err := e.h.deleteGuarded(ctx); err != nil && !errors.Is(err, o.cfg.NotHeld) {
			out = append(out, err)
		}
	}
	cancel()
	switch {
	case o.cfg.Own && o.sess.IsBorrowed():
		out = append(out, o.sess.Detach())
	case o.cfg.Own:
		out = append(out, o.sess.Close())
	}
	o.mu.Lock()
	o.bgClosed = true
	o.mu.Unlock()
	o.bg.Wait()
	if o.unsub != nil {
		o.unsub()
	}
	o.done()
	return errors.Join(out...)
}

// Refused logs a read etcd refused for good (observe.Chan's refused).
func (o *Owner[T]) Refused(err error) {
	o.cfg.Logger.Error("observe: etcd refused the read", o.cfg.Fields(zap.Error(err))...)
}

// Name, Namespace, Prefix and Logger are the primitive's.
func (o *Owner[T]) Name() string        { return o.cfg.Name }
func (o *Owner[T]) Namespace() string   { return o.cfg.Namespace }
func (o *Owner[T]) Prefix() string      { return o.cfg.Prefix }
func (o *Owner[T]) Logger() *zap.Logger { return o.cfg.Logger }
