package mutex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
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
const MaxReasonBytes = 1024

// RequestRelease asks the current holder of the lock name to let go: the
// holder's Lock receives it on ReleaseRequested and decides; nothing is
// released by the request itself. It is for the holder it was made to: a
// later holder never sees it. The request and an audit record (who, when,
// why, which holder) are written in one transaction guarded by the
// holder's key, the audit record under the namespace's audit trail, which
// package rbac grants only to operators: for anyone else etcd refuses the
// transaction (permission denied) and nothing is written. It returns an
// error wrapping ErrNotHeld when nobody holds the lock, and ErrInvalid for
// a bad name, an empty or oversized reason, or bad options (of which it
// uses WithNamespace and WithIdentity).
func RequestRelease(ctx context.Context, cli *clientv3.Client, name, reason string, opts ...Option) error {
	if err := keys.ValidateName("mutex name", name); err != nil {
		return err
	}
	if reason == "" || len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return fmt.Errorf("%w: RequestRelease: reason must be 1 to %d bytes of UTF-8", ErrInvalid, MaxReasonBytes)
	}
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return err
	}
	by, err := cfg.HolderIdentity()
	if err != nil {
		return err
	}
	if cli.Username != "" {
		by = cli.Username + " (" + by + ")"
	}
	_, err = request.Make(ctx, cli, cfg.Namespace, keys.Lock, name, keys.Prefix(cfg.Namespace, keys.Lock, name), reason, by)
	if errors.Is(err, request.ErrNoHolder) {
		return fmt.Errorf("%w: nobody holds %q: %w", ErrNotHeld, name, err)
	}
	if err != nil {
		return fmt.Errorf("mutex %q: request release: %w", name, err)
	}
	return nil
}

// reqWatch watches the release requests to one Lock.
type reqWatch struct {
	ch     chan ReleaseRequest
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ReleaseRequested returns a channel that receives the release requests
// made to this holder (RequestRelease, `baton unlock --request`) while it
// holds: for a Set's Lock, to any of its names. The first call starts a
// watch, which ends with the Lock's Context; Unlock waits for it. Requests
// made before the first call are delivered too. The channel holds one
// request: one pending is all a holder needs to know, and later ones are
// dropped while it is full. It is never closed: select on Done as well.
func (l *Lock) ReleaseRequested() <-chan ReleaseRequest {
	if w := l.rr.Load(); w != nil {
		return w.ch
	}
	w := &reqWatch{ch: make(chan ReleaseRequest, 1)}
	if !l.rr.CompareAndSwap(nil, w) {
		return l.rr.Load().ch
	}
	var cli *clientv3.Client
	if l.set != nil && l.set.locks != nil {
		cli = l.set.cli
	} else {
		cli = l.m.o.Client()
	}
	ctx, cancel := context.WithCancel(l.Context())
	w.cancel = cancel
	var ks []string
	for _, k := range l.Keys() {
		ks = append(ks, request.KeyOf(k, int64(l.Token())))
	}
	request.Watch(ctx, cli, ks, w.ch, &w.wg)
	return w.ch
}

// stopRequests ends the watch of ReleaseRequested, if any, and waits.
func (l *Lock) stopRequests() {
	if w := l.rr.Load(); w != nil {
		w.cancel()
		w.wg.Wait()
	}
}
