package rwmutex

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
)

// Lock is one acquisition of an RWMutex, read or write: the same handle as
// a mutex's Lock. Its methods are safe for concurrent use.
type Lock struct {
	rw     *RWMutex
	o      *core.Owner[*Lock]
	h      *core.Hold
	shared bool
}

// Shared reports whether this is a read lock.
func (l *Lock) Shared() bool { return l.shared }

// Token is the fencing token of this acquisition: the CreateRevision of
// its key. A writer's token is higher than every token held before it; a
// reader's is higher than every writer's before it, but readers hold
// together, so see the package documentation for what a guard checks.
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
// expire the lease, and on Unlock or Close; context.Cause tells why, as
// for a mutex's Lock.
func (l *Lock) Context() context.Context { return l.h.Context() }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.h.Context().Done() }

// Txn returns a transaction that commits only while this lock is held; if
// it is gone, Commit returns an error wrapping ErrNotHeld, applies
// nothing, and ends the Context. Commit is not retried.
func (l *Lock) Txn(ctx context.Context) clientv3.Txn { return l.h.Txn(ctx) }

// IsOwner is the comparison that holds while this lock is held.
func (l *Lock) IsOwner() clientv3.Cmp { return l.h.IsOwner() }

// Unlock ends the Context with ErrReleased and deletes the lock's key in a
// transaction guarded by its CreateRevision. If ctx has already ended a
// fresh context bounded to 5 s is used. After a loss it returns an error
// wrapping ErrNotHeld and the cause. Once it reached etcd, calling it
// again returns the same result.
func (l *Lock) Unlock(ctx context.Context) error { return l.o.Release(ctx, l.h) }
