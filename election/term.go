package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/group"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

type hold = core.Hold

// releaseTimeout bounds a hand-over or release whose caller's ctx ended.
const releaseTimeout = 5 * time.Second

// Term is one leadership won by Campaign. Its methods are safe for
// concurrent use. Besides Value, Proclaim, Resign, Transfer and the end
// requests it has the methods every baton handle has, which package
// session documents: Token (the fencing token, strictly greater than
// every earlier leader's; Proclaim does not change it), Key, Lease, TTL,
// Acquired, Deadline, Txn (a transaction guarded by leadership;
// ErrNotLeader once lost) and IsOwner.
type Term struct {
	*hold
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

// Context is cancelled when leadership may be gone, before the server can
// expire the lease, and on Resign, Transfer or Close; context.Cause says
// why: an error wrapping ErrLost and a reason, ErrReleased, or
// ErrTransferred.
func (t *Term) Context() context.Context { return t.ctx }

// Done is Context().Done().
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
		close(t.endCh)
		telemetry.HoldFrom(t.hold.Context()).Preempted(r.By)
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
		ops := t.e.releaseOps(t.Key(), rec)
		applied, _, _ := group.Commit(ctx, t.e.o.Client(), t.holds(), group.Change{
			Txn:    func() ([]clientv3.Cmp, []clientv3.Op, []clientv3.Op) { return []clientv3.Cmp{t.IsOwner()}, ops, nil },
			Failed: func(*clientv3.TxnResponse, bool) (bool, bool) { return false, false }})
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
