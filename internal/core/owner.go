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
)

const (
	cleanupWait = 80 * time.Millisecond // a failed acquisition's wait for its key's deletion
)

var errBusy = errors.New("held by another contender") // a try found another owner

// OwnerConfig configures an Owner; its Recorder names the primitive
// (Name, Namespace, Label) and records it.
type OwnerConfig struct {
	metrics.Recorder
	Prefix string
	// Errs are the primitive's (one per package, shared by its Owners).
	Errs *Errors
	// Own says the Owner made its session (it closes or detaches it).
	Own bool
	// Untraced keeps the Owner's acquisitions out of traces (an election's
	// candidate records, a detail of its Campaign's own span).
	Untraced bool
}

// Errors are a primitive's errors: NotHeld wraps a handle's loss, Busy is
// a try that found another owner.
type Errors struct{ NotHeld, Busy error }

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
	done  func() // ends this owner's use of its metric series and its renewal-failure count
	mover Mover  // nil: no hand-over moves a waiting key

	calls    inflight.Calls // acquisitions and observers, cancelled when Close begins
	bg       sync.WaitGroup // loss refinements
	mu       sync.Mutex     // guards what follows
	bgClosed bool
	closing  *closing // the first Close's, once it began
	held     []held[T]
}

// closing is the first Close's: a pointer, not a Once and an error per Owner.
type closing struct {
	done chan struct{}
	err  error
}

type held[T any] struct {
	h *Hold
	t T
}

// NewOwner returns an Owner on sess.
func NewOwner[T any](sess *Session, cfg OwnerConfig) *Owner[T] {
	o := &Owner[T]{sess: sess, cfg: cfg, done: cfg.Metrics.Use(cfg.Namespace, cfg.Label)}
	if fn := cfg.Metrics.RenewalFailed(cfg.Namespace, cfg.Label); fn != nil {
		unsub, done := sess.OnRenewalFailure(fn), o.done
		o.done = func() { unsub(); done() }
	}
	return o
}

func (o *Owner[T]) config() *OwnerConfig { return &o.cfg }

// SetMover makes o's waits movable by m; before o is used.
func (o *Owner[T]) SetMover(m Mover) { o.mover = m }

// Client is the etcd client of the owner's session.
func (o *Owner[T]) Client() *clientv3.Client { return o.sess.cli }

// Acquire returns the handle wrap makes once req's key holds, or an error
// (cfg.Errs.Busy for a try, errs.ErrClosed after Close) leaving no key behind.
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
		err, result, outcome = fmt.Errorf("%w: %q", o.cfg.Errs.Busy, o.cfg.Name), "locked", telemetry.Busy
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
	w := s.stream
	wid := w.Expect(key)
	// fail deletes the key (rev 0: unknown, rev < 0: none written).
	fail := func(rev int64, err error) (*Hold, error) {
		w.Unexpect(wid)
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
	case errors.Is(err, queue.ErrNotSent): // never sent: its session closed, or ctx ended while it was queued
		return fail(none, retry.Failure(ctx, errs.ErrClosed))
	case err != nil:
		return fail(0, retry.Failure(ctx, err)) // the put may have applied unheard
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
				return fail(rev, retry.Failure(ctx, err))
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
		at, err = o.wait(ctx, l, key, wid, &rev, req, blockers, allowed, complete, at)
		if errors.Is(err, queue.ErrOwnKeyGone) {
			w.Unexpect(wid)
			s.free(res, nil)
			return nil, o.lostReason(ctx, l)
		}
		if err != nil {
			return fail(rev, err)
		}
	}
	callKey(s.cfg.Hooks.AfterConfirm, key)
	h := newHold(o, l, key, rev, res, req.wait, ok && resp.Succeeded && read.Count == 1)
	h.wid = wid
	w.Register(h, wid, at)
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
// that showed it, or the lease's loss: the deletion of every key ahead
// (complete), or of a mutex's key just ahead by its holder's release,
// each confirmed by one read (queue.AfterDeletion); else it reads the queue
// again, serializably (no older key can appear after a deletion).
func (o *Owner[T]) wait(ctx context.Context, l *Lease, key string, wid int64, revp *int64, req Request, blockers []*mvccpb.KeyValue, allowed int, complete bool, read int64) (int64, error) {
	p := req.Policy
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })()
	w := o.sess.stream
	minRev := int64(0) // 0: read linearizably
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
				return 0, retry.Failure(ctx, err)
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
			read = resp.Header.Revision
			callKey(o.sess.cfg.Hooks.ReadAhead, key)
			blockers, allowed, complete = resp.Responses[0].GetResponseRange().Kvs, 0, p != nil
			if p != nil {
				blockers, allowed = p.Blockers(key, blockers)
			}
			if len(blockers) <= allowed {
				return read, nil
			}
		}
		at, exact, done, err := queue.WaitGone(ctx, o.sess.cli, w, key, wid, blockers, allowed, read)
		switch {
		case moved(&err):
			continue
		case err != nil:
			return 0, err
		case at == 0: // the stream broke
			blockers, minRev = nil, 0
			continue
		case done && complete && req.Confirms && o.mover == nil:
			return at, nil // the caller's guarded write reads our key
		}
		// The key just ahead released by its holder held: nothing older is
		// left (a forged mark, docs/security.md, is not excluded).
		fast := exact && p == nil && o.cfg.Kind == metrics.Mutex
		if done && complete || fast {
			released, err := queue.AfterDeletion(ctx, o.sess.cli, key, rev, at, fast)
			switch {
			case moved(&err):
				continue
			case err != nil && !errors.Is(err, queue.ErrOwnKeyGone):
				return 0, retry.Failure(ctx, err)
			case err != nil:
				return 0, err
			case done && complete || released:
				return at, nil
			}
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

// release is a handle's Unlock, Resign or Release, with a fresh bounded
// ctx if the caller's ended.
func (o *Owner[T]) release(ctx context.Context, h *Hold) error {
	ctx, cancel := retry.ReleaseContext(ctx)
	defer cancel()
	ctx, span := h.span().StartRelease(ctx)
	err := h.deleteGuarded(ctx)
	if err == nil || errors.Is(err, o.cfg.Errs.NotHeld) { // no retry is due: forget h
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
	o.mu.Lock()
	c := o.closing
	first := c == nil
	if first {
		c = &closing{done: make(chan struct{})}
		o.closing = c
	}
	o.mu.Unlock()
	if first {
		c.err = o.close()
		close(c.done)
	}
	<-c.done
	return c.err
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
		} else if err := e.h.deleteGuarded(ctx); err != nil && !errors.Is(err, o.cfg.Errs.NotHeld) {
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
