package semaphore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
)

// Permit is one acquisition of a Semaphore. Its methods are safe for
// concurrent use. Besides Release it has the methods every baton handle
// has (package session describes them for all): Token, Key, Lease, TTL,
// Acquired, Deadline, Context and Done (ended when the permit may be gone,
// context.Cause saying why), Txn (a transaction guarded by the permit's
// key; ErrNotHeld once lost) and IsOwner. Up to Limit permits are held at
// once, so a resource guarded by one high-water mark would reject the
// older holders' tokens: see the package documentation.
type Permit struct {
	hold  *core.Hold
	delay *delay.Config
}

// Release ends the Context with ErrReleased and deletes the permit's key in
// a transaction guarded by its CreateRevision. If ctx has already ended a
// fresh context bounded to 5 s is used. After a loss it returns an error
// wrapping ErrNotHeld and the cause. Once it reached etcd, calling it
// again returns the same result.
func (p *Permit) Release(ctx context.Context) error {
	return delay.Release(ctx, p.delay, p.hold, ErrNotHeld)
}

// Token returns the fencing token: the CreateRevision of the permit's key,
// higher than that of every permit of the semaphore granted before it,
// also across restarts of etcd. Up to Limit permits are current at once,
// so their tokens are not one sequence of owners: guard per slot, not with
// one high-water mark for the semaphore (see the package documentation).
// It never changes, and after Release or a loss it still names this
// permit.
func (p *Permit) Token() fencing.Token { return p.hold.Token() }

// Key returns the permit's etcd key, one of its own per acquisition. It is
// the same after the permit ends, when the key is gone or going.
func (p *Permit) Key() string { return p.hold.Key() }

// Lease returns the ID of the lease the permit's key is attached to: the
// session's, shared by every key held through it. It is the same after the
// permit ends; the lease itself may live on for the session's other holds,
// or be gone after a loss.
func (p *Permit) Lease() clientv3.LeaseID { return p.hold.Lease() }

// TTL returns the TTL the server granted the lease, which can differ from
// the one asked for. It is the same after the permit ends.
func (p *Permit) TTL() time.Duration { return p.hold.TTL() }

// Acquired returns when this process acquired the permit, on its own clock
// (with a monotonic reading). It is the same after the permit ends.
func (p *Permit) Acquired() time.Time { return p.hold.Acquired() }

// Deadline returns the lease's current validity deadline: the send time of
// the last grant or renewal the server acknowledged, plus the TTL, minus
// the safety margin. The Context ends by then unless a renewal is
// acknowledged first. The deadline is the lease's, not the permit's: after
// the permit ends it keeps moving while the session renews the lease for
// others (or stays where a loss left it), and says nothing of this Permit.
func (p *Permit) Deadline() time.Time { return p.hold.Deadline() }

// Context returns a context cancelled when the permit may be gone, before
// the server can expire the lease (by Deadline at the latest), and on
// Release or Close. context.Cause says why: ErrReleased, or an error
// wrapping ErrLost and a reason: ErrKeyGone at once when the key is
// deleted or its lease revoked (Release's error, the logs and the metrics
// then tell ErrKeyDeleted from ErrLeaseExpired), ErrRenewalFailed,
// ErrValidityExpired, ErrLeaseExpired or ErrSessionClosed.
func (p *Permit) Context() context.Context { return p.hold.Context() }

// Done returns Context().Done(): a channel closed when the permit may be
// gone, and on Release or Close.
func (p *Permit) Done() <-chan struct{} { return p.hold.Done() }

// Txn returns a transaction that commits only while the permit's key
// exists with its original CreateRevision: the caller's If, Then and Else
// are nested under IsOwner. If the permit is gone or released, Commit
// returns an error wrapping ErrNotHeld and the cause, applies nothing, and
// ends the Context if the key was found gone. Commit is not retried: the
// caller's operations may not be safe to apply twice. Otherwise it returns
// etcd's error, or the response of the caller's transaction.
func (p *Permit) Txn(ctx context.Context) clientv3.Txn { return p.hold.Txn(ctx) }

// IsOwner returns the comparison that holds while the permit's key exists
// with its original CreateRevision (Key and Token), for building
// transactions by hand. It compares the same key and revision after the
// permit ends, so a transaction guarded by it fails once the key is gone,
// and never succeeds on a later holder's key.
func (p *Permit) IsOwner() clientv3.Cmp { return p.hold.IsOwner() }
