package election

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
)

// Election is a named leader election. Candidates queue in the order they
// campaigned; the oldest leads. An Election is safe for concurrent use.
type Election struct {
	o *core.Owner[*Term]
}

// New returns an Election for name in the configured namespace. It does
// not contact etcd: the lease is granted by the first Campaign. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Election, error) {
	o, _, _, err := config.Open[*Term](cli, config.Primitive{Kind: core.Election, Keys: keys.Election, NotHeld: ErrNotLeader}, name, opts)
	if err != nil {
		return nil, err
	}
	return &Election{o: o}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.o.Name() }

// Namespace returns the election's namespace.
func (e *Election) Namespace() string { return e.o.Namespace() }

// Prefix returns the etcd prefix under which every candidate's key lives.
func (e *Election) Prefix() string { return e.o.Prefix() }

// Campaign queues value as a candidate and returns once it leads, ctx
// ends, or the Election is closed (ErrClosed). It returns success only
// after reading, in the same revision that shows no older candidate, that
// its own key still exists with its original CreateRevision. ctx bounds
// the wait only: the Term's Context lives until leadership is lost or
// resigned. On error no key of this call is left in etcd. A refusal by
// etcd (permission denied, authentication failed, invalid request) is
// returned at once.
//
// A lease has one key per election, so a Campaign through a lease that
// already leads this election (another Election of this process on the
// same session, or this one again) takes that key over and writes its
// value, as etcd's Campaign does: the earlier Term ends first, with
// ErrLost and ErrReplaced, and the token stays the same.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	return e.o.Acquire(ctx, core.Request{Value: value}, func(h *core.Hold) *Term { return &Term{hold: h, value: value} })
}

// Held returns the terms this Election holds, in the order they were
// won: every Term that Campaign returned and that was not resigned since,
// including one whose Context a loss has ended (its Resign is still due).
// It is for inspection, such as a debug endpoint; use a Term's Context,
// not this list, to decide whether to act as leader.
func (e *Election) Held() []*Term { return e.o.Held() }

// Close resigns every term the Election holds (their Context ends with
// ErrReleased), ends every Observe channel, makes waiting and later
// Campaign calls return ErrClosed, and revokes the lease the Election
// created (a shared session is left open). It deletes the Election's
// metric series unless another open Election records under the same
// label, waits for every goroutine the Election started, and is
// idempotent.
func (e *Election) Close() error { return e.o.Close() }
