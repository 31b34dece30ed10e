package mutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
)

// Lock is one acquisition of a Mutex. Its methods are safe for concurrent
// use.
type Lock struct {
	m *Mutex
	h *core.Hold
}

// Token is the fencing token of this acquisition: the CreateRevision of the
// holder's key, strictly greater than every earlier holder's. Pass it to
// the resource you write to, and have it reject lower ones.
func (l *Lock) Token() fencing.Token { return fencing.Token(l.h.Rev()) }

// Key is the holder's etcd key.
func (l *Lock) Key() string { return l.h.Key() }

// Lease is the ID of the lease the key is attached to.
func (l *Lock) Lease() clientv3.LeaseID { return l.h.Lease().ID() }

// TTL is the TTL the server granted the lease.
func (l *Lock) TTL() time.Duration { return l.h.Lease().TTL() }

// Acquired is when this process acquired the lock.
func (l *Lock) Acquired() time.Time { return l.h.Acquired() }

// Deadline is the current validity deadline: the Context ends by then
// unless a renewal is acknowledged first.
func (l *Lock) Deadline() time.Time { return l.h.Lease().Deadline() }

// Context is cancelled when ownership may be gone, before the server can
// expire the lease, and on Unlock or Close. context.Cause tells why: an
// error wrapping ErrLost and a reason, or ErrReleased. When the key is
// deleted (by an admin's delete or its lease's revocation) the Context
// ends in the step that receives the deletion, with the reason ErrKeyGone;
// Unlock's error, the logs and the metrics then tell ErrKeyDeleted from
// ErrLeaseExpired.
func (l *Lock) Context() context.Context { return l.h.Context() }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.h.Context().Done() }

// Txn returns a transaction that commits only while this lock is held:
// the caller's If, Then and Else are nested under a comparison of the
// holder's key and token. If the lock is gone, Commit returns an error
// wrapping ErrNotHeld, applies nothing, and ends the Lock's Context.
// Commit is not retried on a connection error, as the caller's operations
// may not be safe to apply twice: the caller decides.
func (l *Lock) Txn(ctx context.Context) clientv3.Txn { return l.h.Txn(ctx) }

// IsOwner is the comparison that holds while this lock is held, for
// building transactions by hand.
func (l *Lock) IsOwner() clientv3.Cmp { return l.h.IsOwner() }

// Unlock ends the Context with ErrReleased and deletes the holder's key in
// a transaction guarded by its CreateRevision, so it never deletes a later
// holder's key. If ctx has already ended, a fresh context bounded to 5 s is
// used. After a loss it returns an error wrapping ErrNotHeld and the cause.
// The delete is retried through connection resets and etcd leader changes;
// a retry that finds the key gone after an attempt whose reply was lost
// counts as released. Once it has reached etcd, calling it again returns
// the same result (nil after a successful release); if etcd could not be
// reached it returns that error, the key is deleted in the background, and
// it may be called again.
func (l *Lock) Unlock(ctx context.Context) error { return l.m.owner.Release(ctx, l.h) }

// ended records a hold's end in metrics and logs.
// events is what the core tells a Mutex (core.Events), kept out of the
// Mutex's methods.
type events Mutex

func (e *events) Label() string      { return fmt.Sprintf("mutex %q", e.name) }
func (e *events) Started(*core.Hold) {}
func (e *events) Ended(h *core.Hold, cause error, held time.Duration) {
	m := (*Mutex)(e)
	if errors.Is(cause, ErrReleased) {
		m.met.HoldEnded(m.ns, m.label, held, "")
		if m.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			m.log.Debug("lock released", m.fields(h.LogFields()...)...)
		}
		return
	}
	m.met.HoldEnded(m.ns, m.label, held, errs.Reason(cause))
	m.log.Warn("lock lost", m.fields(append(h.LogFields(), zap.Error(cause))...)...)
}
