package semaphore

import (
	"context"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
)

type hold = core.Hold

// Permit is one acquisition of a Semaphore. Its methods are safe for
// concurrent use. Besides Release it has the methods every baton handle
// has, which package session documents: Token, Key, Lease, TTL, Acquired,
// Deadline, Context and Done (ended when the permit may be gone,
// context.Cause saying why), Txn (a transaction guarded by the permit's
// key; ErrNotHeld once lost) and IsOwner. Up to Limit permits are held at
// once, so a resource guarded by one high-water mark would reject the
// older holders' tokens: see the package documentation.
type Permit struct {
	*hold
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
