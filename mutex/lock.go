package mutex

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/request"
)

// Lock is one acquisition of a Mutex, or of every name of a Set. Its
// methods are safe for concurrent use. Besides Unlock, Keys, Compares and
// ReleaseRequested it has the methods every baton handle has (package
// session describes them for all): Token (the fencing token, strictly
// greater than every earlier holder's), Key, Lease, TTL, Acquired,
// Deadline, Context and Done (ended when ownership may be gone,
// context.Cause saying why), Txn (a transaction guarded by ownership;
// ErrNotHeld once lost) and IsOwner.
//
// A Set's Lock has one Token for every name (its keys share one
// CreateRevision), a Context that ends when any of its keys may be lost,
// and a Txn guarded by every key. Key and IsOwner are those of its first
// name's key; Keys and Compares cover them all.
type Lock struct {
	hold *core.Hold   // a Set's: its first name's
	set  *setLock     // a Set's members, or a Mutex's lock-delay; nil for neither
	m    *Mutex       // a Mutex's Lock's, else nil
	rr   request.Lazy // ReleaseRequested's watch
}

// Token returns the fencing token: the CreateRevision of the holder's key,
// strictly greater than every earlier holder's of the same lock, also
// across restarts of etcd. A Set's Lock has one token for all its names
// (its keys share one CreateRevision). Hand it to the resource the lock
// protects (package fencing), which rejects lower ones. It never changes,
// and after Unlock or a loss it still names this acquisition: the one a
// resource must refuse once a later holder wrote.
func (l *Lock) Token() fencing.Token { return l.hold.Token() }

// Key returns the holder's etcd key; a Set's Lock's is its first name's
// (Keys returns them all). It is the same after the hold ends, when the key
// is gone or going; a later Lock through the same lease may put the same
// key again, with a new CreateRevision, so match Token as well.
func (l *Lock) Key() string { return l.hold.Key() }

// Lease returns the ID of the lease the key is attached to: the session's,
// shared by every key held through it (a Set's keys among them). It is the
// same after the hold ends; the lease itself may live on for the
// session's other holds, or be gone after a loss.
func (l *Lock) Lease() clientv3.LeaseID { return l.hold.Lease() }

// TTL returns the TTL the server granted the lease, which can differ from
// the one asked for. It is the same after the hold ends.
func (l *Lock) TTL() time.Duration { return l.hold.TTL() }

// Acquired returns when this process acquired the key, on its own clock
// (with a monotonic reading); a Set's Lock's is its first name's. It is the
// same after the hold ends.
func (l *Lock) Acquired() time.Time { return l.hold.Acquired() }

// Deadline returns the lease's current validity deadline: the send time of
// the last grant or renewal the server acknowledged, plus the TTL, minus
// the safety margin. The Context ends by then unless a renewal is
// acknowledged first. The deadline is the lease's, not the hold's: after
// the hold ends it keeps moving while the session renews the lease for
// others (or stays where a loss left it), and says nothing of this Lock.
func (l *Lock) Deadline() time.Time { return l.hold.Deadline() }

// IsOwner returns the comparison that holds while the key exists with its
// original CreateRevision (Key and Token), for building transactions by
// hand; a Set's Lock's compares its first name's key (Compares covers them
// all). It compares the same key and revision after the hold ends, so a
// transaction guarded by it fails once the key is gone, and never succeeds
// on a later holder's key.
func (l *Lock) IsOwner() clientv3.Cmp { return l.hold.IsOwner() }

// Unlock ends the Context with ErrReleased and deletes the holder's key in
// a transaction guarded by its CreateRevision, so it never deletes a later
// holder's key (a Set's: every key in one transaction guarded by all of
// them). If ctx has already ended, a fresh context bounded to 5 s is used.
// After a loss it returns an error wrapping ErrNotHeld and the cause. The
// delete is retried through connection resets and etcd leader changes; a
// retry that finds the key gone after an attempt whose reply was lost
// counts as released. Once it has reached etcd, calling it again returns
// the same result (nil after a successful release); if etcd could not be
// reached it returns that error, the key is deleted in the background, and
// it may be called again.
func (l *Lock) Unlock(ctx context.Context) error {
	defer l.rr.Stop()
	switch {
	case l.set == nil:
		return core.Release(ctx, l.hold)
	case l.set.locks == nil:
		return delay.Release(ctx, l.set.delay, l.hold, ErrNotHeld)
	}
	return l.set.unlock(ctx)
}

// Context is cancelled when ownership may be gone (for a Set's Lock, of
// any of its keys), before the server can expire the lease (by Deadline at
// the latest), and on Unlock or Close. context.Cause says why: ErrReleased,
// or an error wrapping ErrLost and a reason: ErrKeyGone at once when the
// key is deleted or its lease revoked (Unlock's error, the logs and the
// metrics then tell ErrKeyDeleted from ErrLeaseExpired), ErrRenewalFailed,
// ErrValidityExpired, ErrLeaseExpired or ErrSessionClosed.
func (l *Lock) Context() context.Context {
	if l.set != nil && l.set.locks != nil {
		return l.set.ctx
	}
	return l.hold.Context()
}

// Done returns Context().Done(): a channel closed when ownership may be
// gone, and on Unlock or Close.
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Txn returns a transaction that commits only while the lock is held (for
// a Set's Lock, every key): the caller's If, Then and Else are nested under
// the ownership comparisons. If ownership is gone, Commit returns an error
// wrapping ErrNotHeld, applies nothing, and ends the Context. Commit is not
// retried: the caller's operations may not be safe to apply twice. etcd
// counts the caller's operations against its --max-txn-ops (128 by
// default) after the ownership comparisons: one for a Mutex's Lock, one
// per name for a Set's.
func (l *Lock) Txn(ctx context.Context) clientv3.Txn {
	if l.set != nil && l.set.locks != nil {
		return l.set.txn(ctx)
	}
	return l.hold.Txn(ctx)
}

// Keys returns the holder's keys: one for a Mutex's Lock, one per name,
// in the Set's order, for a Set's.
func (l *Lock) Keys() []string {
	if l.set == nil || l.set.locks == nil {
		return []string{l.Key()}
	}
	out := make([]string, len(l.set.locks))
	for i, m := range l.set.locks {
		out[i] = m.Key()
	}
	return out
}

// Compares returns the comparisons that hold while every key of the lock
// exists with its original CreateRevision, for building transactions by
// hand: IsOwner's alone for a Mutex's Lock, one per key for a Set's.
func (l *Lock) Compares() []clientv3.Cmp {
	if l.set == nil || l.set.locks == nil {
		return []clientv3.Cmp{l.IsOwner()}
	}
	return l.set.compares()
}
