package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/group"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

// releaseTimeout bounds a hand-over or release whose caller's ctx ended.
const releaseTimeout = 5 * time.Second

// Term is one leadership won by Campaign. Its methods are safe for
// concurrent use. Besides Value, Proclaim, Resign, Transfer, IsLeader and
// the end and release requests it has the methods every baton handle has
// (package session describes them for all): Token (the fencing token,
// strictly greater than every earlier leader's; Proclaim does not change
// it), Key, Lease, TTL, Acquired, Deadline, Context and Done, Txn (a
// transaction guarded by leadership; ErrNotLeader once lost) and IsOwner.
type Term struct {
	hold   *core.Hold // the leader's key
	e      *Election
	rec    *core.Hold // the candidate's record; nil without one
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex // serializes Proclaim, Resign and Transfer
	value string

	endOnce sync.Once
	endCh   chan struct{}
	endReq  atomic.Pointer[EndRequest]
	rr      request.Lazy // ReleaseRequested's watch
}

// EndRequest is a request that the leader end its term.
type EndRequest struct {
	// By names who asked: a better candidate's record key, or an operator
	// (`baton resign --to`).
	By string `json:"by"`
	// To is the candidate key the leader is asked to hand over to; empty:
	// the best candidate.
	To string `json:"to,omitempty"`
	// Deadline is how long the requester gives the leader before it
	// preempts it (a candidate) or gives up (an operator).
	Deadline string `json:"deadline,omitempty"`
}

// Token returns the fencing token: the CreateRevision of the leader's key,
// strictly greater than every earlier leader's of the election, also
// across restarts of etcd. Proclaim does not change it. Hand it to the
// resource the leader writes to (package fencing), which rejects lower
// ones. It never changes, and after the term ends it still names this
// term: the one a resource must refuse once a later leader wrote.
func (t *Term) Token() fencing.Token { return t.hold.Token() }

// Key returns the leader's etcd key, in the election's prefix, whose value
// is Value. It is the same after the term ends, when the key is gone or
// going; a later Campaign through the same lease may put the same key
// again, with a new CreateRevision, so match Token as well.
func (t *Term) Key() string { return t.hold.Key() }

// Lease returns the ID of the lease the leader's key is attached to: the
// session's, shared by every key held through it. It is the same after
// the term ends; the lease itself may live on for the session's other
// holds, or be gone after a loss.
func (t *Term) Lease() clientv3.LeaseID { return t.hold.Lease() }

// TTL returns the TTL the server granted the lease, which can differ from
// the one asked for. It is the same after the term ends.
func (t *Term) TTL() time.Duration { return t.hold.TTL() }

// Acquired returns when this process won the term, on its own clock (with
// a monotonic reading). It is the same after the term ends.
func (t *Term) Acquired() time.Time { return t.hold.Acquired() }

// Deadline returns the lease's current validity deadline: the send time of
// the last grant or renewal the server acknowledged, plus the TTL, minus
// the safety margin. The Context ends by then unless a renewal is
// acknowledged first. The deadline is the lease's, not the term's: after
// the term ends it keeps moving while the session renews the lease for
// others (or stays where a loss left it), and says nothing of this Term.
func (t *Term) Deadline() time.Time { return t.hold.Deadline() }

// Txn returns a transaction that commits only while the leader's key
// exists with its original CreateRevision: the caller's If, Then and Else
// are nested under IsOwner. If leadership is gone, or the key was released
// (Resign, Transfer, Close), Commit returns an error wrapping ErrNotLeader
// and the cause, applies nothing, and ends the Context if the key was
// found gone. Commit is not retried: the caller's operations may not be
// safe to apply twice. Otherwise it returns etcd's error, or the response
// of the caller's transaction.
func (t *Term) Txn(ctx context.Context) clientv3.Txn { return t.hold.Txn(ctx) }

// IsOwner returns the comparison that holds while the leader's key exists
// with its original CreateRevision (Key and Token), for building
// transactions by hand. It compares the same key and revision after the
// term ends, so a transaction guarded by it fails once the key is gone, and
// never succeeds on a later leader's key.
func (t *Term) IsOwner() clientv3.Cmp { return t.hold.IsOwner() }

// Context is cancelled when leadership may be gone, before the server can
// expire the lease (by Deadline at the latest), and on Resign, Transfer or
// Close. context.Cause says why: ErrReleased, ErrTransferred, or an error
// wrapping ErrLost and a reason: ErrKeyGone at once when the key is
// deleted or its lease revoked (Resign's error, the logs and the metrics
// then tell ErrKeyDeleted from ErrLeaseExpired), ErrReplaced when another
// Campaign through the same lease took the key over, ErrRenewalFailed,
// ErrValidityExpired, ErrLeaseExpired or ErrSessionClosed.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns Context().Done(): a channel closed when leadership may be
// gone, and on Resign, Transfer or Close.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// IsLeader reports whether the term still leads as far as this process
// knows (its Context has not ended): a cheap local check, for code that
// does not watch Done.
func (t *Term) IsLeader() bool { return t.ctx.Err() == nil }

// EndRequested is closed when someone asks this leader to end its term:
// under Preferred a better candidate (which preempts the leader at its
// WithHandoverDeadline unless it hands over first) or an operator's
// `baton resign --to`. The leader chooses when to hand over: Resign (to
// the best candidate) or Transfer (to the one EndRequest names). Under
// Oldest only a request that names a candidate closes it (RequestEnd,
// `baton resign --to` without --force).
func (t *Term) EndRequested() <-chan struct{} { return t.endCh }

// EndRequest returns the request once EndRequested is closed.
func (t *Term) EndRequest() (EndRequest, bool) {
	if r := t.endReq.Load(); r != nil {
		return *r, true
	}
	return EndRequest{}, false
}

func (t *Term) requested(r EndRequest) {
	t.endOnce.Do(func() {
		t.endReq.Store(&r)
		telemetry.HoldFrom(t.hold.Context()).Preempted(r.By) // first: a span ended on the news would drop it
		close(t.endCh)
	})
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
	if err := t.ended(); err != nil && t.hold.Context().Err() == nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	err := retry.Do(ctx, func(actx context.Context) error { // a put of the same value: safe to repeat
		_, err := t.hold.Txn(clientv3.WithRequireLeader(actx)).Then(clientv3.OpPut(t.Key(), value, clientv3.WithLease(t.Lease()))).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("proclaim: %w", err)
	}
	t.value = value
	return nil
}

// Resign ends the Context with ErrReleased and gives up leadership: under
// Oldest it deletes the leader's key in a transaction guarded by its
// CreateRevision, so the next candidate leads at once and a stale term
// never deletes a later leader's key; under Preferred it hands over to the
// best live candidate in one transaction (no moment without a leader), or
// deletes the key if there is none. If ctx has already ended, a fresh
// context bounded to 5 s is used. After a loss it returns an error
// wrapping ErrNotLeader and the cause. Calling it again returns the same
// result.
func (t *Term) Resign(ctx context.Context) error {
	defer t.rr.Stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.e.strategy() == Preferred && t.IsLeader() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		st, err := t.e.readState(hctx)
		var p *plan
		if err == nil {
			p, err = t.plan(st, "")
		}
		if err == nil {
			_, err = t.handOver(hctx, p, ErrReleased)
		}
		switch {
		case errors.Is(err, ErrNoCandidate), errors.Is(err, ErrStrategy):
			return nil // resigned instead, in the same write
		case err != nil && !errors.Is(err, errEnded) && t.hold.Context().Err() != nil:
			return err // sent: the hold is over
		case err == nil:
			return nil
		}
		// Nobody to hand over to, the state unread, or the term ended: release.
	}
	t.cancel(ErrReleased)
	return t.release(ctx)
}

// release ends the term's key in one write with its candidate record,
// its lock-delay record and any request to end it (releaseOps), guarded by
// the key. A term already lost (or whose key is gone) is released as a
// loss: its lock-delay record stays, so the delay runs.
func (t *Term) release(ctx context.Context) error {
	if t.hold.Context().Err() == nil {
		var rec *entry
		if t.rec != nil {
			rec = &entry{key: t.rec.Key(), rev: int64(t.rec.Token())}
		}
		ops := t.e.releaseOps(t.Key(), int64(t.Token()), rec)
		// Failed: the key is gone, so an attempt that may have applied unheard did (as core's release).
		applied, _, _ := group.Commit(ctx, t.e.o.Client(), t.holds(), group.Change{
			Txn:    func() ([]clientv3.Cmp, []clientv3.Op, []clientv3.Op) { return []clientv3.Cmp{t.IsOwner()}, ops, nil },
			Failed: func(_ *clientv3.TxnResponse, unheard bool) (bool, bool) { return unheard, false }})
		if applied {
			return nil
		}
	}
	err := delay.Release(ctx, t.e.delay, t.hold, ErrNotLeader) // the result of the release above, if it was sent
	t.dropRecord(ctx)
	return err
}

// ReleaseRequested returns a channel that receives the requests made to
// this leader to step down (RequestRelease, `baton resign NAME
// --request`) while it leads; the leader decides. The first call starts a
// watch, which ends with the Term's Context; Resign waits for it. It holds
// one request (later ones are dropped while it is full) and is never
// closed: select on Done as well.
func (t *Term) ReleaseRequested() <-chan ReleaseRequest {
	return t.rr.Chan(t.Context(), t.e.o.Client(), []string{t.Key()}, int64(t.Token()))
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
// record in one transaction guarded by the leader's key; only requesters
// and operators may write the request records of the audit trail
// (package rbac), so for anyone else etcd refuses and nothing is written. It returns an error wrapping
// ErrNotLeader when nobody leads, and ErrInvalid for a bad name or reason.
func RequestRelease(ctx context.Context, cli *clientv3.Client, name, reason string, opts ...Option) error {
	return request.Ask(ctx, cli, keys.Election, "election", name, reason, opts, ErrNotLeader)
}

// dropRecord deletes the candidate's record, once the leader's key is
// gone: a record deleted first would leave a key that looks like another
// strategy's candidate.
func (t *Term) dropRecord(ctx context.Context) {
	if t.rec != nil {
		_ = core.Release(ctx, t.rec)
	}
}
