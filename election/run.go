package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/retry"
)

// Run keeps value campaigning and runs fn while it leads, until ctx ends:
//
//   - fn's context ends when ctx ends or leadership may be lost;
//   - after a loss, Run waits for fn to return, then campaigns again (on a
//     new lease if the old one is gone), so a singleton comes back by
//     itself once etcd recovers;
//   - if fn returns while still leader, Run resigns and returns fn's error
//     (nil included) — unless the leader was asked to end its term
//     (Term.EndRequested) and fn returned nil: then Run hands over (to the
//     candidate the request names, else the best one) and campaigns again;
//   - after a hand-over (fn's own Transfer included) or a preemption Run
//     campaigns again, so one process leads, follows and leads again;
//   - when ctx ends, Run resigns, so the next candidate leads within a
//     round trip instead of a TTL, and returns ctx.Err().
//
// Campaign errors that pass (etcd unreachable, no leader, a lost lease)
// are retried with backoff (100 ms doubling to 5 s) and logged at Warn.
// Errors that cannot pass are returned at once: ErrClosed, ErrInvalid,
// etcd's refusals (permission denied, authentication failed, invalid
// request), the end of an etcd session given to WithSession or wrapped by
// session.Wrap (ErrSessionClosed: it cannot be replaced), and a loss to
// another Campaign through the same lease (ErrReplaced: that one leads
// now), after which Run does not campaign again.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, t *Term) error) error {
	if fn == nil {
		return fmt.Errorf("%w: election.Run: fn must not be nil", ErrInvalid)
	}
	const resignTimeout = 5 * time.Second
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	term := func(ctx context.Context) (stop bool, err error) {
		t, err := e.Campaign(ctx, value)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return true, ctx.Err()
			case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalid), retry.Permanent(err):
				return true, err
			case errors.Is(err, ErrSessionClosed):
				return true, err // a caller's etcd session that ended is never replaced
			}
			return false, err
		}

		work, cancel := context.WithCancelCause(t.Context())
		stopWork := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		ferr := fn(work, t)
		stopWork()
		cancel(nil)

		if ctx.Err() != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
			_ = t.Resign(rctx) // a failed resign only delays the next leader by a TTL
			rcancel()
			return true, ctx.Err()
		}
		if t.Context().Err() == nil && ferr == nil && isClosed(t.EndRequested()) {
			e.handOverRequested(ctx, t)
			return false, nil
		}
		if t.Context().Err() == nil {
			if rerr := t.Resign(ctx); rerr != nil && ferr == nil {
				return true, rerr
			}
			return true, ferr
		}
		// Lost, handed over or preempted: clean up what remains of the key,
		// then campaign again, unless another Campaign through the same
		// lease took the key over.
		if cause := context.Cause(t.Context()); errors.Is(cause, ErrReplaced) {
			return true, fmt.Errorf("%w: %w", ErrNotLeader, cause)
		}
		_ = t.Resign(ctx)
		e.o.Logger().Info("campaigning again", zap.NamedError("cause", context.Cause(t.Context())), zap.NamedError("work", ferr), zap.String("name", e.Name()))
		return false, nil
	}
	return retry.Loop(ctx, minBackoff, maxBackoff, term, func(err error, backoff time.Duration) {
		e.o.Logger().Warn("campaign failed, retrying", zap.Error(err), zap.Duration("backoff", backoff), zap.String("name", e.Name()))
	})
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// handOverRequested hands over as the end request asks: to its target,
// else (or if the target is gone) to the best candidate.
func (e *Election) handOverRequested(ctx context.Context, t *Term) {
	if r, _ := t.EndRequest(); r.To != "" {
		if err := t.Transfer(ctx, r.To); err == nil || t.Context().Err() != nil {
			return
		}
	}
	_ = t.Resign(ctx) // under Preferred a hand-over to the best candidate
}
