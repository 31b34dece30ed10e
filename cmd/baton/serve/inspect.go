package serve

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
)

// Inspect says who holds what. The locks of a namespace are read as
// `baton locks` reads them (package keyspace); elections and shard groups
// are not served yet.
func (s *Server) Inspect(ctx context.Context, req *connect.Request[batonv1.InspectRequest]) (*connect.Response[batonv1.InspectResponse], error) {
	ns := req.Msg.GetNamespace()
	if err := checkNamespace(&ns, s.cfg.Namespace); err != nil {
		return nil, err
	}
	var prefix string
	switch t := req.Msg.GetTarget().(type) {
	case *batonv1.InspectRequest_LocksPrefix:
		prefix = t.LocksPrefix
		if len(prefix) > keys.MaxNameBytes {
			return nil, invalid("locks_prefix", "%d bytes, at most %d", len(prefix), keys.MaxNameBytes)
		}
	case nil:
		return nil, invalid("target", "name one: locks_prefix, election or shard_group")
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("target: only locks_prefix is served yet"))
	}
	c := callerOf(ctx)
	identity, err := c.identity("")
	if err != nil {
		return nil, err
	}
	if err := s.policy.authorize(ns, identity, observe); err != nil {
		return nil, err
	}
	rows, err := keyspace.ListLocks(ctx, s.cli, ns, prefix)
	if err == nil {
		err = keyspace.FillReleases(ctx, s.cli, ns, rows)
	}
	if err != nil {
		code := connect.CodeUnavailable
		if cmdutil.IsPermissionDenied(err) {
			code = connect.CodePermissionDenied
		}
		return nil, connect.NewError(code, err)
	}
	held := make(map[keys.Kind]map[string]time.Time)
	for _, k := range []keys.Kind{keys.Lock, keys.Semaphore, keys.RWLock} {
		held[k], _ = keyspace.ReadHeld(ctx, s.cli, ns, k, "")
	}
	out := &batonv1.InspectResponse{}
	for _, r := range rows {
		li := &batonv1.LockInfo{
			Name: r.Name, Kind: kindOf(r),
			Holder: &batonv1.Contender{Key: r.Holder.Key, Token: int64(r.Holder.Token), Lease: int64(r.Holder.Lease),
				Identity: r.Holder.Identity, Ttl: durationpb.New(r.Holder.TTL)},
			Waiters: uint32(r.Waiters), Limit: uint32(r.Limit), Set: r.Set,
		}
		since := r.Since
		if since.IsZero() {
			since = keyspace.HeldLookup(held[keyspace.HeldKindOf(r)], r.Name, r.Holder.Lease)
		}
		if !since.IsZero() {
			li.Since = timestamppb.New(since)
		}
		if rr := r.Release; rr != nil {
			li.ReleaseRequested = &batonv1.ReleaseRequested{Reason: rr.Reason, By: rr.By, At: timestamppb.New(rr.At)}
		}
		out.Locks = append(out.Locks, li)
	}
	return connect.NewResponse(out), nil
}

func kindOf(r keyspace.LockRow) batonv1.LockKind {
	switch keyspace.RowKind(r) {
	case "semaphore":
		return batonv1.LockKind_LOCK_KIND_SEMAPHORE
	case "rwlock read":
		return batonv1.LockKind_LOCK_KIND_READ
	case "rwlock write":
		return batonv1.LockKind_LOCK_KIND_WRITE
	}
	return batonv1.LockKind_LOCK_KIND_MUTEX
}
