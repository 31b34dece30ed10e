package election

import (
	"context"
	"fmt"
	"sync"

	"github.com/batonhq/baton/internal/core"
)

type hold = core.Hold

// Term is one leadership won by Campaign. Its methods are safe for
// concurrent use. Besides Value, Proclaim and Resign it has the methods
// every baton handle has, which package session documents: Token (the
// fencing token, strictly greater than every earlier leader's; Proclaim
// does not change it), Key, Lease, TTL, Acquired, Deadline, Context and
// Done (ended when leadership may be gone, context.Cause saying why), Txn
// (a transaction guarded by leadership; ErrNotLeader once lost) and
// IsOwner.
type Term struct {
	*hold
	mu    sync.Mutex
	value string
}

// Value is the leader's value: the one campaigned with, or the last one
// proclaimed.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Proclaim replaces the leader's value without giving up leadership; the
// token stays the same. It fails with an error wrapping ErrNotLeader if
// leadership is gone.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := core.Put(ctx, t.hold, value); err != nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	t.value = value
	return nil
}

// Resign ends the Context with ErrReleased and deletes the leader's key in
// a transaction guarded by its CreateRevision, so the next candidate leads
// at once and a stale term never deletes a later leader's key. If ctx has
// already ended, a fresh context bounded to 5 s is used. After a loss it
// returns an error wrapping ErrNotLeader and the cause. Calling it again
// returns the same result.
func (t *Term) Resign(ctx context.Context) error { return core.Release(ctx, t.hold) }
