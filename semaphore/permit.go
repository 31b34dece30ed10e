package semaphore

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

// Permit is one acquisition of a Semaphore. Its methods are safe for
// concurrent use.
type Permit struct {
	s *Semaphore
	h *core.Hold
}

// Token is the fencing token of this permit: the CreateRevision of its key,
// higher than that of every permit of this semaphore granted before it.
// Up to Limit permits are held at once, so a resource guarded by one
// high-water mark would reject the older holders: see the package
// documentation for what a guard checks.
func (p *Permit) Token() fencing.Token { return fencing.Token(p.h.Rev()) }

// Key is the permit's etcd key.
func (p *Permit) Key() string { return p.h.Key() }

// Lease is the ID of the lease the key is attached to.
func (p *Permit) Lease() clientv3.LeaseID { return p.h.Lease().ID() }

// TTL is the TTL the server granted the lease.
func (p *Permit) TTL() time.Duration { return p.h.Lease().TTL() }

// Acquired is when this process acquired the permit.
func (p *Permit) Acquired() time.Time { return p.h.Acquired() }

// Deadline is the current validity deadline: the Context ends by then
// unless a renewal is acknowledged first.
func (p *Permit) Deadline() time.Time { return p.h.Lease().Deadline() }

// Context is cancelled when the permit may be gone, before the server can
// expire the lease, and on Release or Close; context.Cause tells why, as
// for a mutex's Lock.
func (p *Permit) Context() context.Context { return p.h.Context() }

// Done is Context().Done().
func (p *Permit) Done() <-chan struct{} { return p.h.Context().Done() }

// Txn returns a transaction that commits only while this permit is held;
// if it is gone, Commit returns an error wrapping ErrNotHeld, applies
// nothing, and ends the Context. Commit is not retried.
func (p *Permit) Txn(ctx context.Context) clientv3.Txn { return p.h.Txn(ctx) }

// IsOwner is the comparison that holds while this permit is held.
func (p *Permit) IsOwner() clientv3.Cmp { return p.h.IsOwner() }

// Release ends the Context with ErrReleased and deletes the permit's key in
// a transaction guarded by its CreateRevision. If ctx has already ended a
// fresh context bounded to 5 s is used. After a loss it returns an error
// wrapping ErrNotHeld and the cause. Once it reached etcd, calling it
// again returns the same result.
func (p *Permit) Release(ctx context.Context) error { return p.s.owner.Release(ctx, p.h) }

// ended records a permit's end in metrics and logs.
// events is what the core tells a Semaphore (core.Events), kept out of
// the Semaphore's methods.
type events Semaphore

func (e *events) Label() string      { return fmt.Sprintf("semaphore %q", e.name) }
func (e *events) Started(*core.Hold) {}
func (e *events) Ended(h *core.Hold, cause error, held time.Duration) {
	s := (*Semaphore)(e)
	if errors.Is(cause, ErrReleased) {
		s.met.HoldEnded(s.cfg.Namespace, s.label, held, "")
		if s.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			s.log.Debug("permit released", h.LogFields()...)
		}
		return
	}
	s.met.HoldEnded(s.cfg.Namespace, s.label, held, errs.Reason(cause))
	s.log.Warn("permit lost", append(h.LogFields(), zap.Error(cause))...)
}
