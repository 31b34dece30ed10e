package rwmutex

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
)

// Lock is one acquisition of an RWMutex, read or write: the same handle as
// a mutex's Lock. Its methods are safe for concurrent use. Besides Shared
// and Unlock it has the methods every baton handle has (package session
// describes them for all): Token, Key, Lease, TTL, Acquired, Deadline,
// Context and Done, Txn (ErrNotHeld once lost) and IsOwner. A writer's
// token is higher than every token held before it; readers hold together,
// so see the package documentation for what a guard checks.
type Lock struct {
	hold   *core.Hold
	shared bool
	delay  *delay.Config
}

// Shared reports whether this is a read lock.
func (l *Lock) Shared() bool { return l.shared }

// Unlock ends the Context with ErrReleased and deletes the lock's key in a
// transaction guarded by its CreateRevision. If ctx has already ended a
// fresh context bounded to 5 s is used. After a loss it returns an error
// wrapping ErrNotHeld and the cause. Once it reached etcd, calling it
// again returns the same result.
func (l *Lock) Unlock(ctx context.Context) error {
	return delay.Release(ctx, l.delay, l.hold, ErrNotHeld)
}

// Token returns the fencing token: the CreateRevision of the lock's key,
// also across restarts of etcd. A write lock's is higher than every token
// held before it, read or write. A read lock's is higher than every
// earlier writer's, but readers hold together, and those between two
// writers may hold in any order of their tokens: a guard for readers
// accepts any token not lower than the last writer's (see the package
// documentation). It never changes, and after Unlock or a loss it still
// names this acquisition.
func (l *Lock) Token() fencing.Token { return l.hold.Token() }

// Key returns the lock's etcd key, one of its own per acquisition. It is
// the same after the hold ends, when the key is gone or going.
func (l *Lock) Key() string { return l.hold.Key() }

// Lease returns the ID of the lease the key is attached to: the session's,
// shared by every key held through it. It is the same after the hold
// ends; the lease itself may live on for the session's other holds, or be
// gone after a loss.
func (l *Lock) Lease() clientv3.LeaseID { return l.hold.Lease() }

// TTL returns the TTL the server granted the lease, which can differ from
// the one asked for. It is the same after the hold ends.
func (l *Lock) TTL() time.Duration { return l.hold.TTL() }

// Acquired returns when this process acquired the lock, on its own clock
// (with a monotonic reading). It is the same after the hold ends.
func (l *Lock) Acquired() time.Time { return l.hold.Acquired() }

// Deadline returns the lease's current validity deadline: the send time of
// the last grant or renewal the server acknowledged, plus the TTL, minus
// the safety margin. The Context ends by then unless a renewal is
// acknowledged first. The deadline is the lease's, not the hold's: after
// the hold ends it keeps moving while the session renews the lease for
// others (or stays where a loss left it), and says nothing of this Lock.
func (l *Lock) Deadline() time.Time { return l.hold.Deadline() }

// Context returns a context cancelled when the lock may be gone, before
// the server can expire the lease (by Deadline at the latest), and on
// Unlock or Close. context.Cause says why: ErrReleased, or an error
// wrapping ErrLost and a reason: ErrKeyGone at once when the key is
// deleted or its lease revoked (Unlock's error, the logs and the metrics
// then tell ErrKeyDeleted from ErrLeaseExpired), ErrRenewalFailed,
// ErrValidityExpired, ErrLeaseExpired or ErrSessionClosed.
func (l *Lock) Context() context.Context { return l.hold.Context() }

// Done returns Context().Done(): a channel closed when the lock may be
// gone, and on Unlock or Close.
func (l *Lock) Done() <-chan struct{} { return l.hold.Done() }

// Txn returns a transaction that commits only while the lock's key exists
// with its original CreateRevision: the caller's If, Then and Else are
// nested under IsOwner. If the lock is gone or released, Commit returns an
// error wrapping ErrNotHeld and the cause, applies nothing, and ends the
// Context if the key was found gone. Commit is not retried: the caller's
// operations may not be safe to apply twice. Otherwise it returns etcd's
// error, or the response of the caller's transaction. A read lock's Txn
// does not exclude other readers' writes.
func (l *Lock) Txn(ctx context.Context) clientv3.Txn { return l.hold.Txn(ctx) }

// IsOwner returns the comparison that holds while the lock's key exists
// with its original CreateRevision (Key and Token), for building
// transactions by hand. It compares the same key and revision after the
// hold ends, so a transaction guarded by it fails once the key is gone,
// and never succeeds on a later holder's key.
func (l *Lock) IsOwner() clientv3.Cmp { return l.hold.IsOwner() }
