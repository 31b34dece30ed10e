package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/retry"
)

// owner is what a Hold needs of its Owner, whatever its handle type.
type owner interface {
	config() *OwnerConfig
	goBG(fn func()) bool
	deleteKey(l *Lease, key string, rev int64, release *reservation)
}

func (o *Owner[T]) config() *OwnerConfig { return &o.cfg }

// Hold is ownership of one key: a context that ends when ownership may be
// gone, guarded transactions, and release.
type Hold struct {
	o        owner
	lease    *Lease
	key      string
	rev      int64
	acquired time.Time

	ctx     context.Context
	cancel  context.CancelCauseFunc
	release *reservation   // the key's reservation
	watcher *keyWatcher    // tells of the key's deletion; set on registration
	at      int64          // the revision the key was confirmed present at
	armed   sync.WaitGroup // done once arm ran
	ended   sync.WaitGroup // done once the end hooks ran
	cause   error          // the end's cause, reason told apart; set before ended closes
	endOnce sync.Once

	// Guarded by mu; next to endOnce, whose padding they fill (a Hold
	// costs every lock held).
	finished bool // Release reached etcd
	deleting bool // a Release left the key's deletion to the background
	mu       sync.Mutex
	result   error // what Release returned then
}

func newHold(o owner, l *Lease, key string, rev int64, release *reservation) *Hold {
	// Not a child of the lease's context: 10,000 holds would cost its
	// children map an entry each. The lease ends its holds itself
	// (addHold, cancelHolds, endHolds), carrying its cause.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(l.ctx))
	h := &Hold{
		o: o, lease: l, key: key, rev: rev, acquired: time.Now(), ctx: ctx, cancel: cancel,
		release: release,
	}
	h.armed.Add(1)
	h.ended.Add(1)
	return h
}

// arm runs Started, then lets the end hooks run; a hold that ended before
// it was armed ends now, in that order.
func (h *Hold) arm() {
	h.o.config().Events.Started(h)
	h.lease.addHold(h) // the lease's end ends it
	h.armed.Done()
}

// end runs the end hooks once, after arm.
func (h *Hold) end(cause error) {
	h.endOnce.Do(func() {
		h.armed.Wait()
		h.cause = cause
		h.lease.removeHold(h)
		h.o.config().Events.Ended(h, cause, time.Since(h.acquired))
		h.stopWatch() // the end is known: no more deletion news needed
		h.afterLoss(cause)
		h.ended.Done()
	})
}

// gone ends the hold at once when its key was deleted (by a delete or its
// lease's revocation), then tells which in the background for the end
// hooks and Release's error.
func (h *Hold) gone(int64) {
	if h.ctx.Err() != nil {
		return
	}
	h.cancel(errs.Lost(errs.ErrKeyGone))
	if !errors.Is(context.Cause(h.ctx), errs.ErrKeyGone) {
		return // ended otherwise meanwhile
	}
	refine := func() {
		reason := errs.ErrKeyDeleted
		if h.lease.gone(context.Background()) {
			reason = errs.ErrLeaseExpired
			h.lease.lose(errs.ErrLeaseExpired)
		}
		h.end(errs.Lost(reason))
	}
	if !h.o.goBG(refine) {
		h.end(errs.Lost(errs.ErrKeyDeleted)) // closing: no time to ask
	}
}

// afterLoss frees the key's reservation once the key is known gone. After
// a loss declared on this side the lease may still live, and with it the
// key: a granted lease is revoked by its watchdog; a borrowed one is not,
// so the key is deleted in the background and stays reserved until then.
func (h *Hold) afterLoss(cause error) {
	switch {
	case errors.Is(cause, errs.ErrReleased):
		// Release and abandon take care of it.
	case errors.Is(cause, errs.ErrKeyDeleted), errors.Is(cause, errs.ErrLeaseExpired):
		h.release.free()
	case !h.lease.s.IsBorrowed():
		h.release.free()
	default:
		h.o.deleteKey(h.lease, h.key, h.rev, h.release)
	}
}

// Context ends when ownership may be gone or is released.
func (h *Hold) Context() context.Context { return h.ctx }

// Key is the owned key.
func (h *Hold) Key() string { return h.key }

// Rev is the key's CreateRevision: the fencing token.
func (h *Hold) Rev() int64 { return h.rev }

// Lease is the lease the key lives on.
func (h *Hold) Lease() *Lease { return h.lease }

// Acquired is when ownership began, on this process's clock.
func (h *Hold) Acquired() time.Time { return h.acquired }

// IsOwner is the comparison that holds while the key exists with its
// original CreateRevision.
func (h *Hold) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// lostErr is non-nil when the hold ended by a loss; it waits for the
// reason to be told apart.
func (h *Hold) lostErr() error {
	if h.ctx.Err() == nil && h.lease.ctx.Err() != nil {
		h.cancel(context.Cause(h.lease.ctx)) // before endHolds got to it
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
	return fmt.Errorf("%w: %w", h.o.config().NotHeld, cause)
}

// endReleased ends the hold with errs.ErrReleased, running the end hooks
// inline unless a loss got there first.
func (h *Hold) endReleased() {
	h.cancel(errs.ErrReleased)
	if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
		h.end(cause)
	}
}

// Release ends the hold with errs.ErrReleased, then deletes the key in a
// transaction guarded by its CreateRevision, so a stale handle never
// deletes a newer owner's key. If ctx has already ended a fresh one
// bounded by releaseTimeout is used. It returns nil after a release, or an
// error wrapping NotHeld and the cause when ownership was lost first. Once
// it reached etcd, calling it again returns the same result.
func (h *Hold) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return h.result
	}
	lostErr := h.lostErr()
	h.endReleased()
	h.stopWatch()

	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
	} else if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
	}
	// The end hooks have run (endReleased), so h.cause is set.
	if lostErr != nil && (errors.Is(h.cause, errs.ErrKeyDeleted) || errors.Is(h.cause, errs.ErrLeaseExpired)) {
		h.finish(lostErr) // the key is gone: nothing to delete
		return lostErr
	}
	// Guarded by the CreateRevision, the delete is safe to send twice.
	var resp *clientv3.TxnResponse
	unknown := false // an attempt may have applied without our hearing
	err := retry.Do(ctx, func(ctx context.Context) (err error) {
		resp, err = h.lease.s.cli.Txn(clientv3.WithRequireLeader(ctx)).If(h.IsOwner()).Then(clientv3.OpDelete(h.key)).Commit()
		if err != nil {
			unknown = true
		}
		return err
	})
	if err != nil {
		if lostErr != nil && h.lease.ctx.Err() != nil && !h.lease.s.IsBorrowed() {
			h.finish(lostErr) // the lost lease is revoked with its keys
			return lostErr
		}
		if retry.Permanent(err) {
			h.finish(fmt.Errorf("release %s: %w", h.key, err))
			return h.result
		}
		// The key must not outlive the handle: delete it once etcd answers,
		// then free the name, whether or not Release is called again.
		h.deleting = true
		h.o.deleteKey(h.lease, h.key, h.rev, h.release)
		return fmt.Errorf("release %s (deletion continues in the background): %w", h.key, err)
	}
	switch {
	case lostErr != nil:
		h.finish(lostErr)
	case !resp.Succeeded && (unknown || h.deleting):
		// Most likely our own earlier attempt (or the background deletion
		// an earlier Release left) deleted it; the hold had seen no
		// deletion.
		h.finish(nil)
	case !resp.Succeeded:
		h.finish(fmt.Errorf("%w: key %s was gone before release", h.o.config().NotHeld, h.key))
	default:
		h.finish(nil)
	}
	return h.result
}

func (h *Hold) finish(result error) {
	h.finished, h.result = true, result
	h.release.free()
	h.stopWatch()
	h.ended.Wait() // metrics and logs of the end are out when Release returns
}

// abandon ends the hold with errs.ErrReleased without deleting the key,
// for an owner about to revoke the whole lease.
func (h *Hold) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return
	}
	result := h.lostErr()
	h.endReleased()
	h.finish(result)
}

// Txn returns a transaction that applies only while the hold owns its key.
func (h *Hold) Txn(ctx context.Context) clientv3.Txn { return &guardedTxn{h: h, ctx: ctx} }

// guardedTxn nests the caller's transaction inside one that compares the
// holder's key, so the caller's Else still means "your comparison failed"
// and nothing runs once ownership is gone.
type guardedTxn struct {
	h                *Hold
	ctx              context.Context
	cmps             []clientv3.Cmp
	thenOps, elseOps []clientv3.Op
}

func (t *guardedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.cmps = append(t.cmps, cs...); return t }
func (t *guardedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thenOps = append(t.thenOps, ops...)
	return t
}
func (t *guardedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elseOps = append(t.elseOps, ops...)
	return t
}

// Commit fails with NotHeld, and ends the hold, when the key is gone.
func (t *guardedTxn) Commit() (*clientv3.TxnResponse, error) {
	h := t.h
	notHeld := h.o.config().NotHeld
	if err := h.lostErr(); err != nil {
		return nil, err
	}
	if h.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", notHeld, errs.ErrReleased)
	}
	resp, err := h.lease.s.cli.Txn(t.ctx).
		If(h.IsOwner()).
		Then(clientv3.OpTxn(t.cmps, t.thenOps, t.elseOps)).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		h.gone(resp.Header.Revision)
		return nil, fmt.Errorf("%w: fenced transaction rejected: %w", notHeld, context.Cause(h.ctx))
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// Put writes value to the owned key under its lease, guarded by
// ownership (an election's Proclaim), retried through connection resets
// and leader changes while ctx lives.
func (h *Hold) Put(ctx context.Context, value string) error {
	return retry.Do(ctx, func(actx context.Context) error {
		_, err := h.Txn(clientv3.WithRequireLeader(actx)).Then(clientv3.OpPut(h.key, value, clientv3.WithLease(h.lease.id))).Commit()
		return err
	})
}

// LogFields are the fields every log line about this hold carries.
func (h *Hold) LogFields() []zap.Field {
	return []zap.Field{zap.String("key", h.key), zap.Int64("token", h.rev), h.lease.hex()}
}

// stopWatch ends the deletion news of the key (idempotent).
func (h *Hold) stopWatch() { h.watcher.unregister(h.key, h) }
