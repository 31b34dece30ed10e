package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/guard"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

// owner is what a Hold needs of its Owner, whatever its handle type.
type owner interface {
	config() *OwnerConfig
	goBG(fn func()) bool
	started(h *Hold)
	ended(h *Hold, cause error, held time.Duration)
	deleteKey(l *Lease, key string, rev int64, r *reservation, also func(rev int64) []clientv3.Op)
	release(ctx context.Context, h *Hold) error
}

// Hold is ownership of one key, the handle every primitive holds (a
// mutex's Lock, an election's Term, a semaphore's Permit): a context that
// ends when ownership may be gone, the fencing token, guarded transactions.
// Each handle declares these methods itself, each calling the one here.
//
// Every held lock costs one: TestHoldFitsItsSizeClass keeps it in its class.
type Hold struct {
	o        owner
	l        *Lease
	key      string
	rev      int64
	wid      int64         // its watch on the session's stream
	acquired time.Duration // since epoch: Acquired

	ctx    context.Context
	stop   context.CancelCauseFunc // ends ctx: see cancel
	res    *reservation
	armed  sync.WaitGroup // done once arm ran
	ended  sync.WaitGroup // done once the end hooks ran
	cause  error          // the end's cause, reason told apart; set before ended is done
	ending atomic.Bool    // end has begun (once)

	mu       sync.Mutex // guards what follows
	finished bool       // Release reached etcd
	alone    bool       // alone in its queue at rev: Release marks only if a key came after
	deleting bool       // a Release left the key's deletion to the background
	result   error      // what Release returned then

	onEndMu sync.Mutex
	onEnd   []func(cause error) // see OnEnd; nil once run

	prev, next *Hold // the lease's holds (Lease.holds), guarded by its holdsMu
}

// epoch is what Hold.acquired counts from (one word where a time.Time is three).
var epoch = time.Now()

func newHold(o owner, l *Lease, key string, rev int64, res *reservation, wait telemetry.Wait, alone bool) *Hold {
	// Not a child of the lease's context (10,000 holds would each cost it a
	// map entry, and it carries no values): the lease ends its holds itself.
	ctx, stop := context.WithCancelCause(context.Background())
	// The hold's span lives in its Context (none unless it has a trace), so
	// that what runs under the Context is its child and a hold keeps no
	// field for it.
	ctx, _ = wait.Acquired(ctx, rev, int64(l.ID()), key, int64(l.TTL()/time.Second))
	h := &Hold{o: o, l: l, key: key, rev: rev, acquired: time.Since(epoch), ctx: ctx, stop: stop, res: res, alone: alone}
	h.armed.Add(1)
	h.ended.Add(1)
	return h
}

// cancel ends ctx with cause, then runs the OnEnd functions.
func (h *Hold) cancel(cause error) {
	if h.ctx.Err() != nil {
		return
	}
	h.stop(cause)
	h.onEndMu.Lock()
	fs := h.onEnd
	h.onEnd = nil
	h.onEndMu.Unlock()
	for _, f := range fs {
		f(context.Cause(h.ctx))
	}
	callKey(h.l.s.cfg.Hooks.HoldEnded, h.key)
}

// arm runs the start hook, joins the lease's holds and lets the end hooks
// run; a hold whose lease ended already ends before the caller sees it.
func (h *Hold) arm() {
	h.o.started(h)
	l := h.l
	l.holdsMu.Lock()
	if !l.watched {
		l.watched = true
		context.AfterFunc(l.Context(), l.endHolds)
	}
	l.add(h)
	if l.Context().Err() != nil {
		h.cancel(context.Cause(l.Context()))
		if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
			go h.end(cause)
		}
	}
	l.holdsMu.Unlock()
	h.l.s.setHold(h.res, h)
	h.armed.Done()
}

// end runs the end hooks once, after arm; a second call returns once they ran.
func (h *Hold) end(cause error) {
	if h.ending.Swap(true) {
		h.ended.Wait() // as sync.Once's second caller: the end is done when end returns
		return
	}
	h.armed.Wait()
	h.cause = cause
	h.l.holdsMu.Lock()
	h.l.remove(h)
	h.l.holdsMu.Unlock()
	h.o.ended(h, cause, time.Since(epoch)-h.acquired)
	h.l.s.stream.Unregister(h, h.wid)
	h.afterLoss(cause)
	h.ended.Done()
}

// gone ends the hold at once when its key was deleted, then asks etcd in
// the background whether the lease went too.
func (h *Hold) gone() {
	if h.ctx.Err() != nil {
		return
	}
	h.cancel(errs.Lost(errs.ErrKeyGone))
	if !errors.Is(context.Cause(h.ctx), errs.ErrKeyGone) {
		return // ended otherwise meanwhile
	}
	refine := func() {
		reason := errs.ErrKeyDeleted
		if h.l.Gone(context.Background()) {
			reason = errs.ErrLeaseExpired
			h.l.Lose(errs.ErrLeaseExpired)
		}
		h.end(errs.Lost(reason))
	}
	if !h.o.goBG(refine) {
		h.end(errs.Lost(errs.ErrKeyDeleted)) // closing: no time to ask
	}
}

// replaced ends the hold whose key another campaign on its lease took over,
// with the key's reservation.
func (h *Hold) replaced() {
	h.mu.Lock()
	if h.finished { // released meanwhile
		h.mu.Unlock()
		return
	}
	h.finished, h.result = true, fmt.Errorf("%w: %w", h.o.config().Errs.NotHeld, errs.Lost(errs.ErrReplaced))
	h.mu.Unlock()
	h.cancel(errs.Lost(errs.ErrReplaced))
	h.end(context.Cause(h.ctx))
}

// afterLoss frees the key's reservation once the key is gone: a caller's
// lease may keep it after a loss seen here, so it is deleted first.
func (h *Hold) afterLoss(cause error) {
	switch {
	case errors.Is(cause, errs.ErrReleased), errors.Is(cause, errs.ErrReplaced):
		// Release, abandon or the new holder take care of it.
	case errors.Is(cause, errs.ErrKeyDeleted), errors.Is(cause, errs.ErrLeaseExpired), !h.l.s.IsBorrowed():
		h.l.s.free(h.res, h)
	case h.l.s.dropHold(h.res, h): // else a takeover got the key; a takeover now waits for the deletion
		h.o.deleteKey(h.l, h.key, h.rev, h.res, nil)
	}
}

// Token is fencing.Token, the one import of a public package here: every
// handle's Token method returns it, and fencing imports no lock.
type Token = fencing.Token

// Token is the fencing token: the CreateRevision of the key, strictly
// greater than every earlier holder's of the same lock or election.
func (h *Hold) Token() Token { return Token(h.rev) }

// Key is the holder's etcd key.
func (h *Hold) Key() string { return h.key }

// Lease is the ID of the lease the key is attached to.
func (h *Hold) Lease() clientv3.LeaseID { return h.l.ID() }

// TTL is the TTL the server granted the lease.
func (h *Hold) TTL() time.Duration { return h.l.TTL() }

// Acquired is when this process acquired the key.
func (h *Hold) Acquired() time.Time { return epoch.Add(h.acquired) }

// Deadline is the current validity deadline: the Context ends by then
// unless a renewal is acknowledged first.
func (h *Hold) Deadline() time.Time { return h.l.Deadline() }

// Context is cancelled when ownership may be gone, before the server can
// expire the lease, and on release or Close; context.Cause says why: an
// error wrapping ErrLost and a reason, or ErrReleased.
func (h *Hold) Context() context.Context { return h.ctx }

// Done is Context().Done().
func (h *Hold) Done() <-chan struct{} { return h.ctx.Done() }

// IsOwner is the comparison that holds while the key exists with its
// original CreateRevision, for building transactions by hand.
func (h *Hold) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// Txn returns a transaction that commits only while the key is held: the
// caller's If, Then and Else are nested under IsOwner. If ownership is
// gone, Commit returns an error wrapping the package's ErrNotHeld (or
// ErrNotLeader), applies nothing, and ends the Context. Commit is not
// retried: the caller's operations may not be safe to apply twice.
func (h *Hold) Txn(ctx context.Context) clientv3.Txn {
	notHeld := h.o.config().Errs.NotHeld
	return &guard.Txn{Ctx: ctx, KV: h.l.s.cli, Guard: func() []clientv3.Cmp { return []clientv3.Cmp{h.IsOwner()} },
		Check: func() error {
			if err := h.lostErr(); err != nil {
				return err
			}
			if h.ctx.Err() != nil {
				return fmt.Errorf("%w: %w", notHeld, errs.ErrReleased)
			}
			return nil
		},
		Rejected: func() error { // the key is gone: end the hold
			h.gone()
			return fmt.Errorf("%w: fenced transaction rejected: %w", notHeld, context.Cause(h.ctx))
		}}
}

// Release releases h: see Owner.release.
func Release(ctx context.Context, h *Hold) error { return h.o.release(ctx, h) }

// Releasing ends h as released before the caller deletes its key with others'
// in one txn (mutex.Set); Released finishes it then, without a round trip.
func Releasing(h *Hold) { h.mu.Lock(); h.endReleased(); h.mu.Unlock() }
func Released(h *Hold)  { h.mu.Lock(); h.finish(nil); h.mu.Unlock() }

// OnEnd runs f with the cause in the step that ends h's Context (at once if
// it has ended), so that what ends with h (a mutex.Set's Context) has ended
// before anything the end lets happen: no goroutine hop, as
// context.AfterFunc would take.
func OnEnd(h *Hold, f func(cause error)) {
	h.onEndMu.Lock()
	if h.ctx.Err() == nil {
		h.onEnd = append(h.onEnd, f)
		h.onEndMu.Unlock()
		return
	}
	h.onEndMu.Unlock()
	f(context.Cause(h.ctx))
}

// lostErr is non-nil when the hold ended by a loss, once the reason is told
// apart.
func (h *Hold) lostErr() error {
	if h.ctx.Err() == nil && h.l.Context().Err() != nil {
		h.cancel(context.Cause(h.l.Context())) // before endHolds got to it
	}
	if h.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(h.ctx)
	if errors.Is(cause, errs.ErrReleased) {
		return nil
	}
	if errors.Is(cause, errs.ErrKeyGone) {
		h.ended.Wait()
		cause = h.cause
	}
	return fmt.Errorf("%w: %w", h.o.config().Errs.NotHeld, cause)
}

// endReleased ends the hold with errs.ErrReleased, unless a deletion did.
func (h *Hold) endReleased() {
	h.cancel(errs.ErrReleased)
	if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
		h.end(cause)
	}
}

// deleteGuarded ends the hold and deletes its key guarded by its
// CreateRevision (so retrying is safe); nil, or NotHeld and the loss's
// cause. Once it reached etcd it returns the same result again.
func (h *Hold) deleteGuarded(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return h.result
	}
	lostErr := h.lostErr()
	h.endReleased()
	if lostErr != nil && (errors.Is(h.cause, errs.ErrKeyDeleted) || errors.Is(h.cause, errs.ErrLeaseExpired)) {
		return h.finish(lostErr) // the key is gone: nothing to delete
	}
	if h.l.Revoked() { // by its session's Close or after a loss: the key went with it
		if lostErr == nil && !h.deleting { // a retry after "deletion continues" counts as released
			lostErr = fmt.Errorf("%w: key %s was gone before release (its lease was revoked)", h.o.config().Errs.NotHeld, h.key)
		}
		return h.finish(lostErr)
	}
	var resp *clientv3.TxnResponse
	unknown := false // an attempt may have applied without our hearing
	err := retry.Do(ctx, func(ctx context.Context) (err error) {
		txn := h.l.s.cli.Txn(retry.Leader(ctx))
		if !planted.On("a") {
			txn = txn.If(h.IsOwner())
		}
		resp, err = txn.Then(queue.Release(h.key, !planted.On("a"), h.alone, h.rev)...).Commit()
		unknown = unknown || (err != nil && !planted.On("z"))
		return err
	})
	switch {
	case err != nil && lostErr != nil && h.l.Context().Err() != nil && !h.l.s.IsBorrowed():
		return h.finish(lostErr) // the lost lease is revoked with its keys
	case err != nil && retry.Permanent(err):
		return h.finish(fmt.Errorf("release %s: %w", h.key, err))
	case err != nil:
		// The key must not outlive the handle: delete it once etcd answers.
		h.deleting = true
		h.o.deleteKey(h.l, h.key, h.rev, h.res, nil)
		return fmt.Errorf("release %s (deletion continues in the background): %w", h.key, err)
	case lostErr != nil:
		return h.finish(lostErr)
	case !resp.Succeeded && !unknown && !h.deleting:
		return h.finish(fmt.Errorf("%w: key %s was gone before release", h.o.config().Errs.NotHeld, h.key))
	}
	return h.finish(nil)
}

func (h *Hold) finish(result error) error {
	h.finished, h.result = true, result
	h.l.s.free(h.res, h) // not a reservation a takeover got meanwhile
	h.ended.Wait()       // metrics and logs of the end are out when Release returns
	return result
}

// abandon ends the hold without deleting the key: the lease's revoke will.
func (h *Hold) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.finished {
		result := h.lostErr()
		h.endReleased()
		h.finish(result)
	}
}

// span is the hold's recorded span; the zero one if not recorded.
func (h *Hold) span() telemetry.Hold { return telemetry.HoldFrom(h.ctx) }

func (h *Hold) logFields() []zap.Field {
	return []zap.Field{zap.String("key", h.key), zap.Int64("token", h.rev), h.l.Hex()}
}
