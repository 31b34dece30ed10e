package rwmutex

import (
	"context"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
)

type hold = core.Hold

// Lock is one acquisition of an RWMutex, read or write: the same handle as
// a mutex's Lock. Its methods are safe for concurrent use. Besides Shared
// and Unlock it has the methods every baton handle has, which package
// session documents: Token, Key, Lease, TTL, Acquired, Deadline, Context
// and Done, Txn (ErrNotHeld once lost) and IsOwner. A writer's token is
// higher than every token held before it; readers hold together, so see
// the package documentation for what a guard checks.
type Lock struct {
	*hold
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
