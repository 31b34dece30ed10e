package mutex

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// ReleaseRequest is a request to a holder to let go, made by
// RequestRelease or `baton unlock NAME --request`. Its fields: Reason (the
// requester's text: untrusted, escape it to print it), By (who asked: the
// etcd user when auth is on, and the requester's identity), At (when, on
// the requester's clock), Key and Token (the holder's it was made to),
// Audit (the key of its audit record).
type ReleaseRequest = request.Request

// MaxReasonBytes bounds a release request's reason.
const MaxReasonBytes = request.MaxReasonBytes

// RequestRelease asks the current holder of the lock name to let go: the
// holder's Lock receives it on ReleaseRequested and decides; nothing is
// released by the request itself. It is for the holder it was made to: a
// later holder never sees it. The request and an audit record (who, when,
// why, which holder) are written in one transaction guarded by the
// holder's key, the audit record under the request records of the
// namespace's audit trail, which package rbac lets only requesters and
// operators write: for anyone else etcd refuses the transaction
// (permission denied) and nothing is written. The request key goes on the
// holder's lease, which etcd allows only to a user who may write every key
// attached to that lease. It returns an
// error wrapping ErrNotHeld when nobody holds the lock, and ErrInvalid for
// a bad name, an empty or oversized reason, or bad options (of which it
// uses WithNamespace and WithIdentity).
func RequestRelease(ctx context.Context, cli *clientv3.Client, name, reason string, opts ...Option) error {
	return request.Ask(ctx, cli, keys.Lock, "mutex", name, reason, opts, ErrNotHeld)
}

// ReleaseRequested returns a channel that receives the release requests
// made to this holder (RequestRelease, `baton unlock --request`) while it
// holds: for a Set's Lock, to any of its names. The first call starts a
// watch, which ends with the Lock's Context; Unlock waits for it. Requests
// made before the first call are delivered too. The channel holds one
// request: one pending is all a holder needs to know, and later ones are
// dropped while it is full. It is never closed: select on Done as well.
func (l *Lock) ReleaseRequested() <-chan ReleaseRequest {
	cli := l.set.cliOr(l.m)
	return l.rr.Chan(l.Context(), cli, l.Keys(), int64(l.Token()))
}

// cliOr is a set's client, else the Mutex's.
func (s *setLock) cliOr(m *Mutex) *clientv3.Client {
	if s != nil && s.locks != nil {
		return s.cli
	}
	return m.o.Client()
}
