package shard

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
)

// Shard is one shard owned by this member, the handle Run passes to fn.
// Its methods are safe for concurrent use. Besides ID, Member and Count it
// has the methods every baton handle has (package session describes them
// for all): Token (the fencing token, strictly greater than every earlier
// owner's of the same shard), Key, Lease, TTL, Acquired, Deadline, Context
// and Done, Txn and IsOwner.
//
// Context ends before any other member can own the shard: with ErrMoved
// when the assignment gives it to another member, with an error wrapping
// ErrLost and a reason when the lease may be gone (before the server can
// expire it), with ErrReleased when Run ends or the Group is closed.
// Txn stays guarded by the key itself, so work that drains after ErrMoved
// may still write through it until the shard is released.
type Shard struct {
	hold   *core.Hold
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

// Token returns the fencing token: the CreateRevision of the shard's key,
// strictly greater than every earlier owner's of the same shard, also
// across restarts of etcd. Hand it to the resource the shard's work writes
// to (package fencing), which rejects lower ones. It never changes, and
// after the shard is released or lost it still names this ownership: the
// one a resource must refuse once a later owner wrote.
func (s *Shard) Token() fencing.Token { return s.hold.Token() }

// Key returns the shard's etcd key held by this member. It is the same
// after the shard is released or lost, when the key is gone or going.
func (s *Shard) Key() string { return s.hold.Key() }

// Lease returns the ID of the lease the shard's key is attached to: the
// member's session's, shared by all its shards. It is the same after the
// shard is released; the lease itself may live on for the member's other
// shards, or be gone after a loss.
func (s *Shard) Lease() clientv3.LeaseID { return s.hold.Lease() }

// TTL returns the TTL the server granted the lease, which can differ from
// the one asked for. It is the same after the shard is released.
func (s *Shard) TTL() time.Duration { return s.hold.TTL() }

// Acquired returns when this member took the shard, on its own clock (with
// a monotonic reading). It is the same after the shard is released.
func (s *Shard) Acquired() time.Time { return s.hold.Acquired() }

// Deadline returns the lease's current validity deadline: the send time of
// the last grant or renewal the server acknowledged, plus the TTL, minus
// the safety margin. The Context ends by then unless a renewal is
// acknowledged first. The deadline is the lease's, not the shard's: after
// the shard is released it keeps moving while the session renews the lease
// for the member's other shards (or stays where a loss left it), and says
// nothing of this Shard.
func (s *Shard) Deadline() time.Time { return s.hold.Deadline() }

// Txn returns a transaction that commits only while the shard's key exists
// with its original CreateRevision: the caller's If, Then and Else are
// nested under IsOwner. It is guarded by the key, not by the Context: work
// that drains after ErrMoved may still write through it until the shard is
// released. Once the shard is released or lost, Commit returns an error
// wrapping ErrNotHeld and the cause, applies nothing, and ends the Context
// if the key was found gone. Commit is not retried: the caller's operations
// may not be safe to apply twice. Otherwise it returns etcd's error, or the
// response of the caller's transaction.
func (s *Shard) Txn(ctx context.Context) clientv3.Txn { return s.hold.Txn(ctx) }

// IsOwner returns the comparison that holds while the shard's key exists
// with its original CreateRevision (Key and Token), for building
// transactions by hand. It compares the same key and revision after the
// shard is released, so a transaction guarded by it fails once the key is
// gone, and never succeeds on a later owner's key.
func (s *Shard) IsOwner() clientv3.Cmp { return s.hold.IsOwner() }
