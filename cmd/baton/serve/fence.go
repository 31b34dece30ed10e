package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
)

// A Fence call is fencing.EtcdGuard on a resource's high-water mark, kept
// under /<namespace>/v1/fence/<escaped resource>:
//
//	op           checks                                       then
//	-----------  -------------------------------------------  -----------------------------------------
//	check_token  fields; the policy lets identity contend     Admit: the mark raised to the token, or
//	                                                           FAILED_PRECONDITION (stale) with the mark
//	write        fields; every key under the namespace's      Write: the ops, the mark and the hold's
//	             data prefix (else PERMISSION_DENIED); the     ownership in one transaction, or nothing
//	             hold_id the caller's (NOT_FOUND /             (stale: FAILED_PRECONDITION with the mark;
//	             PERMISSION_DENIED as Heartbeat); the hold     the hold lost: FAILED_PRECONDITION)
//	             in the request's namespace; a membership's
//	             names a shard it owns (or drains)
//
// Every refusal comes before anything is written.

// dataPrefix is where a fenced write may put and delete keys: the
// namespace's data prefix, /<namespace>/v1/data/. A caller the policy lets
// contend in a namespace may write there (the contenders' etcd role covers
// the namespace's prefix, this part included); the keys of locks,
// elections, shard groups, fences and the audit trail are outside it.
func dataPrefix(ns string) string { return keys.NamespacePrefix(ns) + "data/" }

// maxFencedOps bounds the puts and deletes of one write: with the mark's
// compare-and-swap and the hold's guard, the transaction stays well within
// etcd's default --max-txn-ops (128).
const maxFencedOps = 64

// Fence admits a token for a resource, or writes in etcd under a hold's
// token, guarded by the hold's ownership and the resource's mark.
func (s *Server) Fence(ctx context.Context, req *connect.Request[batonv1.FenceRequest]) (*connect.Response[batonv1.FenceResponse], error) {
	sp, err := checkFence(req.Msg, s.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	guard, err := fencing.NewEtcdGuard(s.cli, fencing.WithNamespace(sp.namespace))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if sp.write == nil {
		identity, err := callerOf(ctx).identity(sp.identity)
		if err != nil {
			return nil, err
		}
		if err := s.policy.authorize(sp.namespace, identity, contend); err != nil {
			return nil, err
		}
		return fenced(sp.token, guard.Admit(ctx, sp.resource, sp.token))
	}
	w := sp.write
	if err := w.within(dataPrefix(sp.namespace)); err != nil {
		return nil, err
	}
	h, err := s.holdOf(ctx, w.holdID)
	if err != nil {
		return nil, fieldOf("write.", err)
	}
	var holder fencing.Holder = h.lock
	switch {
	case h.members != nil && w.shard == nil:
		return nil, invalid("write.shard", "a membership's write names the shard whose ownership guards it")
	case h.members != nil:
		sh, err := h.members.owner(*w.shard)
		if err != nil {
			return nil, err
		}
		holder = sh
	case w.shard != nil:
		return nil, invalid("write.shard", "only a Shards membership's hold_id takes a shard")
	}
	switch {
	case h.ns != sp.namespace:
		return nil, invalid("namespace", "%q: the hold is in namespace %q, and writes under its own namespace's mark", sp.namespace, h.ns)
	case sp.identity != "" && sp.identity != h.identity:
		return nil, invalid("identity", "%q: a write is its hold's identity's, %q", sp.identity, h.identity)
	}
	if err := s.policy.authorize(sp.namespace, h.identity, contend); err != nil {
		return nil, err
	}
	token := holder.Token()
	_, err = guard.Write(ctx, holder, sp.resource, w.ops()...)
	return fenced(token, err)
}

// fenced is a Fence's answer: the mark after it, or the refusal.
func fenced(t fencing.Token, err error) (*connect.Response[batonv1.FenceResponse], error) {
	var stale *fencing.StaleError
	switch {
	case err == nil:
		return connect.NewResponse(&batonv1.FenceResponse{Highest: int64(t)}), nil
	case errors.As(err, &stale):
		// The mark travels in the error's details, as a FenceResponse.
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		if d, derr := connect.NewErrorDetail(&batonv1.FenceResponse{Highest: int64(stale.Highest)}); derr == nil {
			ce.AddDetail(d)
		}
		return nil, ce
	case errors.Is(err, fencing.ErrContended):
		return nil, connect.NewError(connect.CodeAborted, err)
	case notHeld(err):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the hold is lost: %w", err))
	case errors.Is(err, fencing.ErrInvalid):
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil, etcdError(err)
}

// fieldOf prefixes a hold_id refusal's field with the message that
// holds it ("write.hold_id: ...").
func fieldOf(parent string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && strings.HasPrefix(ce.Message(), "hold_id:") {
		return connect.NewError(ce.Code(), errors.New(parent+ce.Message()))
	}
	return err
}

// within refuses, with PERMISSION_DENIED, a key outside prefix.
func (w *fencedWrite) within(prefix string) error {
	check := func(field, key string) error {
		if !strings.HasPrefix(key, prefix) || key == prefix {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s: %q is outside the namespace's data prefix %s, the only keys a fenced write may touch", field, key, prefix))
		}
		return nil
	}
	for i, kv := range w.puts {
		if err := check(fmt.Sprintf("write.puts[%d].key", i), kv.GetKey()); err != nil {
			return err
		}
	}
	for i, k := range w.deletes {
		if err := check(fmt.Sprintf("write.deletes[%d]", i), k); err != nil {
			return err
		}
	}
	return nil
}

func (w *fencedWrite) ops() []clientv3.Op {
	ops := make([]clientv3.Op, 0, len(w.puts)+len(w.deletes))
	for _, kv := range w.puts {
		ops = append(ops, clientv3.OpPut(kv.GetKey(), string(kv.GetValue())))
	}
	for _, k := range w.deletes {
		ops = append(ops, clientv3.OpDelete(k))
	}
	return ops
}
