package shard

import (
	"context"

	"github.com/batonhq/baton/internal/core"
)

type hold = core.Hold

// Shard is one shard owned by this member, the handle Run passes to fn.
// Its methods are safe for concurrent use. Besides ID, Member and Count it
// has the methods every baton handle has, which package session documents:
// Token (the fencing token, strictly greater than every earlier owner's of
// the same shard), Key, Lease, TTL, Acquired, Deadline, Context and Done,
// Txn and IsOwner.
//
// Context ends before any other member can own the shard: with ErrMoved
// when the assignment gives it to another member, with an error wrapping
// ErrLost and a reason when the lease may be gone (before the server can
// expire it), with ErrReleased when Run ends or the Group is closed.
// Txn stays guarded by the key itself, so work that drains after ErrMoved
// may still write through it until the shard is released.
type Shard struct {
	*hold
	id     int
	count  int
	member string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newShard(h *core.Hold, id, count int, member string) *Shard {
	ctx, cancel := context.WithCancelCause(h.Context())
	return &Shard{hold: h, id: id, count: count, member: member, ctx: ctx, cancel: cancel}
}

// ID is the shard's number, 0 to Count()-1.
func (s *Shard) ID() int { return s.id }

// Count is the group's number of shards.
func (s *Shard) Count() int { return s.count }

// Member is the name of the member that owns the shard (Run's).
func (s *Shard) Member() string { return s.member }

// Context ends before another member can own the shard; context.Cause
// says why (see Shard).
func (s *Shard) Context() context.Context { return s.ctx }

// Done is Context().Done().
func (s *Shard) Done() <-chan struct{} { return s.ctx.Done() }
