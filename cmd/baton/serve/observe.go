package serve

import (
	"context"

	"connectrpc.com/connect"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// Observe streams the holder of a mutex or the leader of an election, as
// the library's Observe sends them: the current state first ("none"
// included), then every change, one message per etcd revision. It reads
// only, so any level of the namespace policy may; it holds nothing, so it
// is not counted in --max-holds. It ends with the stream, or with
// UNAVAILABLE when the server shuts down. Each message is sent under the
// write deadline of a hold of the default TTL (send.go): a caller that
// does not take one within it is cut off (its stream reset), and the
// observation ends.
func (s *Server) Observe(ctx context.Context, req *connect.Request[batonv1.ObserveRequest], stream *connect.ServerStream[batonv1.ObserveResponse]) error {
	ns, name, kind := req.Msg.GetNamespace(), req.Msg.GetName(), req.Msg.GetKind()
	if err := checkNamespace(&ns, s.cfg.Namespace); err != nil {
		return err
	}
	switch kind {
	case batonv1.ObjectKind_OBJECT_KIND_LOCK, batonv1.ObjectKind_OBJECT_KIND_ELECTION:
	case batonv1.ObjectKind_OBJECT_KIND_UNSPECIFIED:
		return invalid("kind", "name one: OBJECT_KIND_LOCK or OBJECT_KIND_ELECTION")
	default:
		return invalid("kind", "unknown kind %d", int32(kind))
	}
	if err := keys.ValidateName("name", name); err != nil {
		return invalid("name", "%v", unwrapInvalid(err))
	}
	identity, err := callerOf(ctx).identity("")
	if err != nil {
		return err
	}
	if err := s.policy.authorize(ns, identity, observe); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()

	snd := s.sender(ctx, mutex.DefaultTTL)
	send := func(m *batonv1.ObserveResponse) error { return snd.send(func() error { return stream.Send(m) }) }
	var rerr error // the relay's end
	if kind == batonv1.ObjectKind_OBJECT_KIND_LOCK {
		m, err := mutex.New(s.cli, name, mutex.WithNamespace(ns))
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		defer func() { _ = m.Close() }()
		rerr = relay(m.Observe(octx), lockState, send)
	} else {
		el, err := election.New(s.cli, name, election.WithNamespace(ns))
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		defer func() { _ = el.Close() }()
		rerr = relay(el.Observe(octx), leaderState, send)
	}
	if rerr == nil && s.stopCtx.Err() != nil && ctx.Err() == nil {
		return connect.NewError(connect.CodeUnavailable, errServerShutdown)
	}
	return rerr
}

// relay sends every state of a library's observation until its channel
// closes or the caller leaves (or does not take a message within the
// write deadline); a refusal by etcd ends it with its code.
func relay[T any](in <-chan T, f func(T) state, send func(*batonv1.ObserveResponse) error) error {
	for v := range in {
		st := f(v)
		if st.err != nil {
			code := connect.CodeUnavailable
			if cmdutil.IsPermissionDenied(st.err) {
				code = connect.CodePermissionDenied
			}
			return connect.NewError(code, st.err)
		}
		if err := send(st.msg); err != nil {
			return nil // the caller left, or was cut off
		}
	}
	return nil
}

// state is one observed state as the API sends it, or the library's
// refusal that ends the observation.
type state struct {
	msg *batonv1.ObserveResponse
	err error
}

func lockState(h mutex.Holder) state {
	if h.Err != nil {
		return state{err: h.Err}
	}
	m := &batonv1.ObserveResponse{Revision: h.Revision}
	if !h.IsZero() {
		m.Holder = &batonv1.Contender{Key: h.Key, Token: int64(h.Token), Lease: int64(h.Lease), Identity: h.Identity}
	}
	return state{msg: m}
}

func leaderState(l election.Leader) state {
	if l.Err != nil {
		return state{err: l.Err}
	}
	m := &batonv1.ObserveResponse{Revision: l.Revision}
	if !l.IsZero() {
		m.Holder = &batonv1.Contender{Key: l.Key, Token: int64(l.Token), Lease: int64(l.LeaseID), Value: l.Value}
	}
	return state{msg: m}
}
