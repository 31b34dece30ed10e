package mutex

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/request"
)

type hold = core.Hold

// Lock is one acquisition of a Mutex, or of every name of a Set. Its
// methods are safe for concurrent use. Besides Unlock and Keys it has the
// methods every baton handle has, which package session documents: Token
// (the fencing token, strictly greater than every earlier holder's), Key,
// Lease, TTL, Acquired, Deadline, Context and Done (ended when ownership
// may be gone, context.Cause saying why), Txn (a transaction guarded by
// ownership; ErrNotHeld once lost) and IsOwner.
//
// A Set's Lock has one Token for every name (its keys share one
// CreateRevision), a Context that ends when any of its keys may be lost,
// and a Txn guarded by every key. Key and IsOwner are those of its first
// name's key; Keys and Compares cover them all.
type Lock struct {
	*hold
	set *setLock     // a Set's members, or a Mutex's lock-delay; nil for neither
	m   *Mutex       // a Mutex's Lock's, else nil
	rr  request.Lazy // ReleaseRequested's watch
}

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
// any of its keys), before the server can expire the lease, and on Unlock
// or Close; context.Cause says why: an error wrapping ErrLost and a
// reason, or ErrReleased.
func (l *Lock) Context() context.Context {
	if l.set != nil && l.set.locks != nil {
		return l.set.ctx
	}
	return l.hold.Context()
}

// Done is Context().Done().
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
