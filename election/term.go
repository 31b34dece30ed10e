package election

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
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
	delay *delay.Config
	cli   *clientv3.Client
	rr    request.Lazy // ReleaseRequested's watch
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
func (t *Term) Resign(ctx context.Context) error {
	defer t.rr.Stop()
	return delay.Release(ctx, t.delay, t.hold, ErrNotLeader)
}

// ReleaseRequested returns a channel that receives the requests made to
// this leader to step down (RequestRelease, `baton resign NAME
// --request`) while it leads; the leader decides. The first call starts a
// watch, which ends with the Term's Context; Resign waits for it. It holds
// one request (later ones are dropped while it is full) and is never
// closed: select on Done as well.
func (t *Term) ReleaseRequested() <-chan ReleaseRequest {
	return t.rr.Chan(t.Context(), t.cli, []string{t.Key()}, int64(t.Token()))
}

// ReleaseRequest is a request to a leader to step down, made by
// RequestRelease or `baton resign NAME --request`: the same type as
// mutex.ReleaseRequest. Its fields: Reason (untrusted text: escape it to
// print it), By (who asked), At (when, on the requester's clock), Key and
// Token (the leader's it was made to), Audit (its audit record's key).
type ReleaseRequest = request.Request

// RequestRelease asks the current leader of election name to step down:
// its Term receives it on ReleaseRequested and decides. It is for that
// leader only (a later one never sees it), and is written with an audit
// record in one transaction guarded by the leader's key; only operators
// may write the audit trail (package rbac), so for anyone else etcd
// refuses and nothing is written. It returns an error wrapping
// ErrNotLeader when nobody leads, and ErrInvalid for a bad name or reason.
func RequestRelease(ctx context.Context, cli *clientv3.Client, name, reason string, opts ...Option) error {
	return request.Ask(ctx, cli, keys.Election, "election", name, reason, opts, ErrNotLeader)
}
