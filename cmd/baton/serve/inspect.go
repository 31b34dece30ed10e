package serve

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/shard"
)

// Inspect says who holds what, read as the CLI reads it: the locks of a
// namespace as `baton locks` (package keyspace), an election's leader and
// candidates as `baton candidates` (the leader first), a shard group as
// `baton shards` (every shard, an unowned one without a member). It reads
// only: any level of the namespace policy may.
func (s *Server) Inspect(ctx context.Context, req *connect.Request[batonv1.InspectRequest]) (*connect.Response[batonv1.InspectResponse], error) {
	ns := req.Msg.GetNamespace()
	if err := checkNamespace(&ns, s.cfg.Namespace); err != nil {
		return nil, err
	}
	var read func(context.Context, string) (*batonv1.InspectResponse, error)
	switch t := req.Msg.GetTarget().(type) {
	case *batonv1.InspectRequest_LocksPrefix:
		if len(t.LocksPrefix) > keys.MaxNameBytes {
			return nil, invalid("locks_prefix", "%d bytes, at most %d", len(t.LocksPrefix), keys.MaxNameBytes)
		}
		read = func(ctx context.Context, ns string) (*batonv1.InspectResponse, error) {
			return s.inspectLocks(ctx, ns, t.LocksPrefix)
		}
	case *batonv1.InspectRequest_Election:
		if err := keys.ValidateName("election", t.Election); err != nil {
			return nil, invalid("election", "%v", unwrapInvalid(err))
		}
		read = func(ctx context.Context, ns string) (*batonv1.InspectResponse, error) {
			return s.inspectElection(ctx, ns, t.Election)
		}
	case *batonv1.InspectRequest_ShardGroup:
		if err := keys.ValidateName("shard_group", t.ShardGroup); err != nil {
			return nil, invalid("shard_group", "%v", unwrapInvalid(err))
		}
		read = func(ctx context.Context, ns string) (*batonv1.InspectResponse, error) {
			return s.inspectShards(ctx, ns, t.ShardGroup)
		}
	default:
		return nil, invalid("target", "name one: locks_prefix, election or shard_group")
	}
	identity, err := callerOf(ctx).identity("")
	if err != nil {
		return nil, err
	}
	if err := s.policy.authorize(ns, identity, observe); err != nil {
		return nil, err
	}
	out, err := read(ctx, ns)
	if err != nil {
		return nil, etcdError(err)
	}
	return connect.NewResponse(out), nil
}

// etcdError is the error of a call whose read or write etcd refused or
// did not answer: PERMISSION_DENIED when it refused the server's user,
// else UNAVAILABLE.
func etcdError(err error) error {
	code := connect.CodeUnavailable
	if cmdutil.IsPermissionDenied(err) {
		code = connect.CodePermissionDenied
	}
	return connect.NewError(code, err)
}

// inspectLocks is `baton locks` of the locks whose names start with prefix.
func (s *Server) inspectLocks(ctx context.Context, ns, prefix string) (*batonv1.InspectResponse, error) {
	rows, err := keyspace.ListLocks(ctx, s.cli, ns, prefix)
	if err == nil {
		err = keyspace.FillReleases(ctx, s.cli, ns, rows)
	}
	if err != nil {
		return nil, err
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
	return out, nil
}

// inspectElection is `baton candidates`: the leader first (also in
// leader), then the candidates in the election's order, each with its
// lease's time left.
func (s *Server) inspectElection(ctx context.Context, ns, name string) (*batonv1.InspectResponse, error) {
	el, err := election.New(s.cli, name, election.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	defer func() { _ = el.Close() }()
	cands, err := el.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	info := &batonv1.ElectionInfo{Name: name}
	for _, c := range cands {
		ct := &batonv1.Contender{Key: c.Key, Token: int64(c.Token), Lease: int64(c.LeaseID), Value: c.Value, Ttl: durationpb.New(c.TTL)}
		if c.Leader {
			info.Leader = ct
		}
		info.Candidates = append(info.Candidates, ct)
	}
	return &batonv1.InspectResponse{Election: info}, nil
}

// inspectShards is `baton shards`: one owner per shard (index = shard,
// no member when unowned) and the live members, at one revision.
func (s *Server) inspectShards(ctx context.Context, ns, group string) (*batonv1.InspectResponse, error) {
	st, err := shard.Inspect(ctx, s.cli, group, shard.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	info := &batonv1.ShardGroupInfo{Group: group, Count: uint32(len(st.Owners)), Members: st.Members}
	for _, o := range st.Owners {
		info.Owners = append(info.Owners, &batonv1.ShardOwner{Shard: uint32(o.Shard), Member: o.Member, Token: int64(o.Token), Key: o.Key})
	}
	return &batonv1.InspectResponse{Revision: st.Revision, ShardGroup: info}, nil
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
