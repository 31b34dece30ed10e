package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/retry"
)

// releaseTimeout bounds a release whose caller's ctx has already ended.
const releaseTimeout = 5 * time.Second

// Hold is ownership of one key: a context that ends when ownership may be
// gone, a watch that notices the key's deletion, guarded transactions, and
// release.
type Hold struct {
	sess     *lease.Session
	cli      *clientv3.Client
	key      string
	rev      int64
	notHeld  error
	acquired time.Time

	ctx       context.Context
	cancel    context.CancelCauseFunc
	release   func()
	stopWatch func()
	stopEnd   func() bool // unregisters end from the context
	hooks     Hooks
	ended     chan struct{} // the end hooks ran

	mu       sync.Mutex
	finished bool  // Release reached etcd
	result   error // what Release returned then
}

// Hooks are told of a hold's end, once, with its cause (errs.ErrReleased or
// a loss).
type Hooks struct {
	OnEnd func(h *Hold, cause error, held time.Duration)
	// Background tracks the deletion of a key left behind by a loss.
	Background *sync.WaitGroup
	// Closing stops that deletion.
	Closing <-chan struct{}
}

// NewHold starts watching the key of a successful acquisition. notHeld is
// the package's sentinel for a handle that no longer owns (ErrNotHeld,
// ErrNotLeader).
func NewHold(s *lease.Session, r Result, notHeld error, hooks Hooks) *Hold {
	ctx, cancel := context.WithCancelCause(s.Context())
	h := &Hold{
		sess: s, cli: s.Client(), key: r.Key, rev: r.Rev, notHeld: notHeld, acquired: time.Now(),
		ctx: ctx, cancel: cancel, release: r.Release, ended: make(chan struct{}),
	}
	h.hooks = hooks
	h.stopEnd = context.AfterFunc(ctx, h.end)
	h.stopWatch = s.WatchDeletion(r.Key, r.Rev, r.Header, func() {
		if h.ctx.Err() == nil { // not our own release
			h.lose(LostReason(context.Background(), s))
		}
	})
	return h
}

// end runs the end hooks once the hold's context has ended.
func (h *Hold) end() {
	defer close(h.ended)
	cause := context.Cause(h.ctx)
	if h.hooks.OnEnd != nil {
		h.hooks.OnEnd(h, cause, time.Since(h.acquired))
	}
	h.afterLoss(cause, h.hooks)
}

// endReleased ends the hold with errs.ErrReleased. The end hooks run here
// rather than in the goroutine context.AfterFunc would start, unless a
// loss got there first.
func (h *Hold) endReleased() {
	inline := h.stopEnd()
	h.cancel(errs.ErrReleased)
	if inline {
		h.end()
	}
}

// afterLoss frees the key's reservation once the key is gone, so that the
// next acquisition through the same session does not wait for the caller
// to Unlock a lost handle. When the loss was declared on this side
// (renewals failed, validity passed, the session ended) the lease may still
// live, and with it the key: a borrowed session's lease is not revoked, so
// delete the key in the background as soon as etcd answers.
func (h *Hold) afterLoss(cause error, hooks Hooks) {
	switch {
	case errors.Is(cause, errs.ErrReleased):
		return // Release or Abandon take care of it
	case errors.Is(cause, errs.ErrKeyDeleted), errors.Is(cause, errs.ErrLeaseExpired):
		h.release()
		return
	}
	if h.sess.Owned() || hooks.Background == nil {
		h.release() // the owner revokes the lost lease when it replaces it
		return
	}
	h.deleteLater()
}

// deleteLater deletes the key (guarded by its CreateRevision) in the
// background, retrying until it is gone, the session's lease ends, or the
// owner closes; then it frees the key's reservation.
func (h *Hold) deleteLater() {
	if h.hooks.Background == nil {
		return
	}
	h.hooks.Background.Add(1)
	go func() {
		defer h.hooks.Background.Done()
		defer h.release()
		cs := h.sess.Concurrency()
		for attempt := 0; ; attempt++ {
			if deleteKey(h.cli, h.key, h.rev) == nil {
				return
			}
			select {
			case <-cs.Done():
				return
			case <-h.hooks.Closing:
				return
			case <-time.After(retry.Backoff(attempt)):
			}
		}
	}()
}

// Context ends when ownership may be gone or is released.
func (h *Hold) Context() context.Context { return h.ctx }

// Key is the owned key.
func (h *Hold) Key() string { return h.key }

// Rev is the key's CreateRevision.
func (h *Hold) Rev() int64 { return h.rev }

// Session is the session the key lives on.
func (h *Hold) Session() *lease.Session { return h.sess }

// Acquired is when ownership began, on this process's clock.
func (h *Hold) Acquired() time.Time { return h.acquired }

// IsOwner is the comparison that holds while the key exists with its
// original CreateRevision.
func (h *Hold) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
}

// lose ends the hold with a loss cause (no effect once it ended).
func (h *Hold) lose(cause error) { h.cancel(cause) }

// Release ends the hold with errs.ErrReleased, then deletes the key in a
// transaction guarded by its CreateRevision, so a stale handle never
// deletes a newer owner's key. If ctx has already ended it uses a fresh one
// bounded by releaseTimeout. It returns nil after a release, or an error
// wrapping notHeld and the cause when ownership was lost first. Once
// Release has reached etcd, calling it again returns the same result; when
// etcd could not be reached it may be called again to retry.
func (h *Hold) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return h.result
	}
	lostErr := h.lostErr()
	h.endReleased()
	h.stopWatch() // our own deletion is no news

	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
	} else if _, ok := ctx.Deadline(); !ok {
		// Retries must end: the background deletion takes over after.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
	}
	// Guarded by the CreateRevision, the delete is safe to send twice: retry
	// it through connection resets and leader changes while ctx lives.
	var resp *clientv3.TxnResponse
	unknown := false // an attempt may have been applied without our hearing
	err := retry.Do(ctx, func(ctx context.Context) (err error) {
		resp, err = h.cli.Txn(clientv3.WithRequireLeader(ctx)).If(h.IsOwner()).Then(clientv3.OpDelete(h.key)).Commit()
		if err != nil {
			unknown = true
		}
		return err
	})
	if err != nil {
		if lostErr != nil && h.sess.Lost() {
			// The lease is lost and etcd unreachable: the key goes with the
			// lease, or was replaced with the session.
			h.finish(lostErr)
			return lostErr
		}
		// The handle has ended; the key must not outlive it and block the
		// queue: delete it in the background once etcd answers.
		h.deleteLater()
		return fmt.Errorf("release %s (deletion continues in the background): %w", h.key, err)
	}
	switch {
	case lostErr != nil:
		h.finish(lostErr)
	case !resp.Succeeded && unknown:
		// Most likely our own earlier attempt deleted it and its reply was
		// lost (a connection reset); a deletion by someone else in that
		// instant cannot be told apart, and the hold had not seen one.
		h.finish(nil)
	case !resp.Succeeded:
		h.finish(fmt.Errorf("%w: key %s was gone before release", h.notHeld, h.key))
	default:
		h.finish(nil)
	}
	return h.result
}

func (h *Hold) finish(result error) {
	h.finished, h.result = true, result
	h.release()
	h.stopWatch()
	<-h.ended // metrics and logs of the end are out when Release returns
}

// lostErr is non-nil when the hold ended by a loss.
func (h *Hold) lostErr() error {
	if h.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(h.ctx)
	if errors.Is(cause, errs.ErrReleased) {
		return nil
	}
	return fmt.Errorf("%w: %w", h.notHeld, cause)
}

// Txn returns a transaction that applies only while the hold owns its key.
func (h *Hold) Txn(ctx context.Context) clientv3.Txn { return &guardedTxn{h: h, ctx: ctx} }

// guardedTxn nests the caller's transaction inside one that compares the
// holder's key, so the caller's Else branch still means "your comparison
// failed" and nothing runs at all once ownership is gone.
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

// Commit fails with notHeld, and ends the hold, when the key is gone.
func (t *guardedTxn) Commit() (*clientv3.TxnResponse, error) {
	h := t.h
	if err := h.lostErr(); err != nil {
		return nil, err
	}
	if h.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", h.notHeld, errs.ErrReleased)
	}
	resp, err := h.cli.Txn(t.ctx).
		If(h.IsOwner()).
		Then(clientv3.OpTxn(t.cmps, t.thenOps, t.elseOps)).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		h.lose(LostReason(t.ctx, h.sess))
		return nil, fmt.Errorf("%w: fenced transaction rejected: %w", h.notHeld, context.Cause(h.ctx))
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}

// Put writes value to the owned key under its lease, guarded by ownership
// (an election's Proclaim).
// The put is guarded and the same each time, so it is retried through
// connection resets and leader changes while ctx lives.
func (h *Hold) Put(ctx context.Context, value string) error {
	return retry.Do(ctx, func(actx context.Context) error {
		_, err := h.Txn(clientv3.WithRequireLeader(actx)).Then(clientv3.OpPut(h.key, value, clientv3.WithLease(h.sess.ID()))).Commit()
		return err
	})
}

// Abandon ends the hold with errs.ErrReleased without deleting the key, for
// an owner about to revoke the whole lease.
func (h *Hold) Abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return
	}
	result := h.lostErr()
	h.endReleased()
	h.finish(result)
}

// LogFields are the fields every log line about this hold carries.
func (h *Hold) LogFields() []zap.Field {
	return []zap.Field{
		zap.String("key", h.key),
		zap.Int64("token", h.rev),
		zap.String("lease", fmt.Sprintf("%x", int64(h.sess.ID()))),
	}
}
