package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
)

// Term is one leadership won by Campaign. Its methods are safe for
// concurrent use.
type Term struct {
	e *Election
	h *core.Hold

	mu    sync.Mutex
	value string
}

// Token is the fencing token of this term: the CreateRevision of the
// leader's key, strictly greater than every earlier leader's. Proclaim
// does not change it.
func (t *Term) Token() fencing.Token { return fencing.Token(t.h.Rev()) }

// Key is the leader's etcd key.
func (t *Term) Key() string { return t.h.Key() }

// Value is the leader's value: the one campaigned with, or the last one
// proclaimed.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Lease is the ID of the lease the key is attached to.
func (t *Term) Lease() clientv3.LeaseID { return t.h.Lease().ID() }

// TTL is the TTL the server granted the lease.
func (t *Term) TTL() time.Duration { return t.h.Lease().TTL() }

// Acquired is when this process became leader.
func (t *Term) Acquired() time.Time { return t.h.Acquired() }

// Deadline is the current validity deadline.
func (t *Term) Deadline() time.Time { return t.h.Lease().Deadline() }

// Context is cancelled when leadership may be gone, before the server can
// expire the lease, and on Resign or Close. context.Cause tells why: an
// error wrapping ErrLost and a reason, or ErrReleased.
func (t *Term) Context() context.Context { return t.h.Context() }

// Done is Context().Done().
func (t *Term) Done() <-chan struct{} { return t.h.Context().Done() }

// Txn returns a transaction that commits only while this term lasts: the
// caller's If, Then and Else are nested under a comparison of the leader's
// key and token. If leadership is gone, Commit returns an error wrapping
// ErrNotLeader, applies nothing, and ends the Term's Context.
// Commit is not retried on a connection error, as the caller's operations
// may not be safe to apply twice: the caller decides.
func (t *Term) Txn(ctx context.Context) clientv3.Txn { return t.h.Txn(ctx) }

// IsOwner is the comparison that holds while this term lasts.
func (t *Term) IsOwner() clientv3.Cmp { return t.h.IsOwner() }

// Proclaim replaces the leader's value without giving up leadership; the
// token stays the same. It fails with an error wrapping ErrNotLeader if
// leadership is gone.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.h.Put(ctx, value); err != nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	t.value = value
	return nil
}

// Resign ends the Context with ErrReleased and deletes the leader's key in
// a transaction guarded by its CreateRevision, so the next candidate leads
// at once and a stale term never deletes a later leader's key. If ctx has
// already ended, a fresh context bounded to 5 s is used. After a loss it
// returns an error wrapping ErrNotLeader and the cause. Calling it again
// returns the same result.
func (t *Term) Resign(ctx context.Context) error { return t.e.owner.Release(ctx, t.h) }

// events is what the core tells an Election (core.Events), kept out of
// the Election's methods.
type events Election

func (ev *events) Label() string { return fmt.Sprintf("election %q", ev.name) }
func (ev *events) Started(*core.Hold) {
	e := (*Election)(ev)
	e.met.Leading(e.cfg.Namespace, e.label, true, "")
}
func (ev *events) Ended(h *core.Hold, cause error, held time.Duration) {
	e := (*Election)(ev)
	if errors.Is(cause, ErrReleased) {
		e.met.Leading(e.cfg.Namespace, e.label, false, "")
		e.log.Info("resigned", append(h.LogFields(), zap.Duration("led", held))...)
		return
	}
	e.met.Leading(e.cfg.Namespace, e.label, false, errs.Reason(cause))
	e.log.Warn("leadership lost", append(h.LogFields(), zap.Duration("led", held), zap.Error(cause))...)
}
