package mutex

import (
	"context"

	"github.com/batonhq/baton/internal/core"
)

type hold = core.Hold

// Lock is one acquisition of a Mutex. Its methods are safe for concurrent
// use. Besides Unlock it has the methods every baton handle has, which
// package session documents: Token (the fencing token, strictly greater
// than every earlier holder's), Key, Lease, TTL, Acquired, Deadline,
// Context and Done (ended when ownership may be gone, context.Cause saying
// why), Txn (a transaction guarded by ownership; ErrNotHeld once lost) and
// IsOwner.
type Lock struct{ *hold }

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
func (l *Lock) Unlock(ctx context.Context) error { return core.Release(ctx, l.hold) }
