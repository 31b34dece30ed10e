package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// A Lead stream is a Hold whose acquisition is a term: the same checks,
// limits, heartbeats, validity and ends (see the table in hold.go), with
// these differences:
//
//	state    event                                  action, next state
//	-------  -------------------------------------  ------------------------------------------
//	waiting  leads                                  send leading, held
//	held     a better candidate / `resign --to`     send end_requested (once), held
//	held     operator's release request             send end_requested, held
//	held     Resign (or Release)                    resign (hand over under Preferred), send resigned, end
//	held     Transfer accepted                      hand over, send resigned, end
//	held     Transfer refused (no such candidate)   the RPC's error, held
//
// Every candidate has an etcd lease of its own: the library's election
// takes one lease for one candidate, so candidates of one TTL cannot
// share the Hold sessions' lease.

// Lead campaigns in an election and leads while the stream is open and
// heartbeats arrive.
func (s *Server) Lead(ctx context.Context, req *connect.Request[batonv1.LeadRequest], stream *connect.ServerStream[batonv1.LeadResponse]) error {
	ctx, span := s.startSpan(ctx, req.Header(), "Lead")
	err := s.serveLead(ctx, req, stream)
	endSpan(span, err)
	return err
}

func (s *Server) serveLead(ctx context.Context, req *connect.Request[batonv1.LeadRequest], stream *connect.ServerStream[batonv1.LeadResponse]) error {
	arrival := time.Now()
	sp, err := checkLead(req.Msg, s.cfg.Namespace, s.cfg.MaxTTL)
	if err != nil {
		s.metrics.requests.WithLabelValues("refused").Inc()
		return err
	}
	c := callerOf(ctx)
	identity, leave, err := s.admit(c, sp.namespace, sp.identity)
	if err != nil {
		return err
	}
	defer leave()
	if sp.value == "" {
		sp.value = identity
	}

	closeFn, t, err := s.campaign(ctx, sp)
	if closeFn != nil {
		defer closeFn()
	}
	if err != nil {
		return err
	}
	h := &hold{
		id: newHoldID(), principal: c.principal(), budget: budgetOf(sp.ttl), lock: t.acquired, identity: identity, ns: sp.namespace, names: []string{sp.name},
		release: make(chan struct{}), ended: make(chan struct{}), transfers: make(chan transferRequest),
	}
	s.holds.add(h)
	defer s.holds.remove(h.id)
	s.metrics.holds.WithLabelValues("held").Inc()
	defer s.metrics.holds.WithLabelValues("held").Dec()
	spanHeld(ctx, h)

	h.mu.Lock()
	h.beatBy = time.Now().Add(h.budget)
	until := h.validUntil()
	h.mu.Unlock()
	ev := leadEvents{sender: s.sender(ctx, sp.ttl), stream: stream, term: t.term}
	err = ev.send(func() error {
		return stream.Send(&batonv1.LeadResponse{Event: &batonv1.LeadResponse_Leading{Leading: &batonv1.Leading{
			HoldId: h.id, Token: int64(t.Token()), Key: t.Key(), Lease: int64(t.Lease()),
			Ttl: durationpb.New(t.TTL()), Validity: durationpb.New(until.Sub(arrival)),
			Deadline: timestamppb.New(until), HeartbeatInterval: durationpb.New(heartbeatInterval(sp.ttl)),
		}}})
	})
	if err != nil {
		return s.end(ctx, h, ev, err)
	}
	return s.run(ctx, h, ev)
}

// term is a term as a hold's acquisition.
type term struct {
	*acquired
	term *election.Term
}

// campaign waits until the candidate leads, the stream closes or the
// server shuts down. closeFn closes the election and its lease once the
// term ended.
func (s *Server) campaign(ctx context.Context, sp leadSpec) (closeFn func(), t term, err error) {
	sess, err := s.sessions.own(sp.ttl)
	if err != nil {
		return nil, t, connect.NewError(connect.CodeUnavailable, err)
	}
	opts := []election.Option{election.WithSession(sess), election.WithNamespace(sp.namespace), election.WithMetricLabel("serve"),
		election.WithStrategy(sp.strategy), election.WithPriority(sp.priority)}
	if sp.version != "" {
		opts = append(opts, election.WithVersion(sp.version))
	}
	el, err := election.New(s.cli, sp.name, opts...)
	if err != nil {
		_ = sess.Close()
		return nil, t, connect.NewError(connect.CodeInvalidArgument, err)
	}
	closeFn = func() { _ = el.Close(); _ = sess.Close() }
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.stopCtx, func() { cancel(errServerShutdown) })
	defer stop()
	s.metrics.holds.WithLabelValues("waiting").Inc()
	et, err := el.Campaign(wctx, sp.value)
	s.metrics.holds.WithLabelValues("waiting").Dec()
	if err == nil {
		s.metrics.requests.WithLabelValues("held").Inc()
		return closeFn, fromTerm(el, et), nil
	}
	result, code := "error", connect.CodeUnavailable
	switch cause := context.Cause(wctx); {
	case errors.Is(cause, errServerShutdown):
		result, code, err = "canceled", connect.CodeUnavailable, cause
	case ctx.Err() != nil:
		result, code, err = "canceled", connect.CodeCanceled, errStreamClosed
	case errors.Is(err, election.ErrStrategy):
		result, code, err = "refused", connect.CodeFailedPrecondition, fmt.Errorf("strategy: %w", err)
	case cmdutil.IsPermissionDenied(err):
		code = connect.CodePermissionDenied
	}
	s.metrics.requests.WithLabelValues(result).Inc()
	return closeFn, t, connect.NewError(code, err)
}

func fromTerm(el *election.Election, t *election.Term) term {
	return term{term: t, acquired: &acquired{
		handle: t, kind: keys.Election, keys: []string{t.Key()}, compares: []clientv3.Cmp{t.IsOwner()},
		release: t.Resign, reqKeys: requestKeys([]string{t.Key()}, t.Token()), ends: t.EndRequested(),
		transfer: func(ctx context.Context, to string) (int64, error) { return transfer(ctx, el, t, to) },
	}}
}

// transfer hands t over to the candidate to names (its key, or the
// identity it campaigned with as its value) and returns the leader's
// token as read after the hand-over.
func transfer(ctx context.Context, el *election.Election, t *election.Term, to string) (int64, error) {
	key, err := candidateKey(ctx, el, to)
	if err != nil {
		return 0, err
	}
	if err := t.Transfer(ctx, key); err != nil {
		return 0, err
	}
	l, err := el.Leader(ctx)
	if err != nil {
		return 0, nil // handed over; the successor may have left already
	}
	return int64(l.Token), nil
}

// errAmbiguous is a Transfer to an identity several candidates share.
var errAmbiguous = errors.New("several candidates wait with that identity")

// candidateKey is to itself when it is a key, else the key of the one
// candidate (not the leader) whose value is to, as `baton resign --to`
// finds it.
func candidateKey(ctx context.Context, el *election.Election, to string) (string, error) {
	if strings.HasPrefix(to, "/") {
		return to, nil
	}
	cands, err := el.Candidates(ctx)
	if err != nil {
		return "", err
	}
	var found []string
	for _, c := range cands {
		if c.Value == to && !c.Leader {
			found = append(found, c.Key)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w: none waits with identity %q", election.ErrNoCandidate, to)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%w (%q): name one by its key (%s)", errAmbiguous, to, strings.Join(found, ", "))
}

// leadEvents are a Lead stream's messages.
type leadEvents struct {
	sender
	stream *connect.ServerStream[batonv1.LeadResponse]
	term   *election.Term
}

func (e leadEvents) lost(cause error) {
	_ = e.send(func() error {
		return e.stream.Send(&batonv1.LeadResponse{Event: &batonv1.LeadResponse_Ended{Ended: &batonv1.Lost{Cause: causeOf(cause), Message: cause.Error()}}})
	})
}

func (e leadEvents) released() {
	_ = e.send(func() error {
		return e.stream.Send(&batonv1.LeadResponse{Event: &batonv1.LeadResponse_Resigned{Resigned: &batonv1.Released{}}})
	})
}

// releaseRequested is an operator's `baton resign NAME --request`: a
// request to end the term, with no deadline.
func (e leadEvents) releaseRequested(r request.Request) error {
	return e.send(func() error {
		return e.stream.Send(&batonv1.LeadResponse{Event: &batonv1.LeadResponse_EndRequested{EndRequested: &batonv1.EndRequested{
			Reason: r.Reason, By: r.By,
		}}})
	})
}

// endRequested is a better candidate's request (Preferred) or an
// operator's `baton resign NAME --to`: its deadline is the requester's
// grace counted from now.
func (e leadEvents) endRequested() error {
	r, _ := e.term.EndRequest()
	m := &batonv1.EndRequested{Reason: "hand over to the best candidate", By: r.By}
	if r.To != "" {
		m.Reason = "hand over to " + r.To
	}
	if d, err := time.ParseDuration(r.Deadline); err == nil && d > 0 {
		m.Deadline = timestamppb.New(time.Now().Add(d))
	}
	return e.send(func() error {
		return e.stream.Send(&batonv1.LeadResponse{Event: &batonv1.LeadResponse_EndRequested{EndRequested: m}})
	})
}

// transferRequest is a Transfer, handed to the term's loop, which owns
// the term's end; reply has room for the one answer.
type transferRequest struct {
	ctx   context.Context
	to    string
	reply chan transferReply
}

type transferReply struct {
	token int64
	err   error
}

// transfer runs tr in the term's loop, bounded by the Transfer call, the
// stream and the server's shutdown.
func (s *Server) transfer(ctx context.Context, h *hold, tr transferRequest) (int64, error) {
	tctx, cancel := context.WithCancel(tr.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	defer context.AfterFunc(s.stopCtx, cancel)()
	return h.lock.transfer(tctx, tr.to)
}

// Resign ends a term: the next candidate leads (under Preferred, the best
// one, handed over in one write), and the stream ends with resigned.
func (s *Server) Resign(ctx context.Context, req *connect.Request[batonv1.ResignRequest]) (*connect.Response[batonv1.ResignResponse], error) {
	h, err := s.termOf(ctx, req.Msg.GetHoldId())
	if err != nil {
		return nil, err
	}
	if err := s.release(ctx, h); err != nil {
		return nil, err
	}
	return connect.NewResponse(&batonv1.ResignResponse{}), nil
}

// Transfer hands a term to the candidate `to` names and returns once the
// stream's term ended (resigned sent). A refusal leaves the term as it
// was: NOT_FOUND when to is no live candidate, FAILED_PRECONDITION when
// it names several, or a hand-over that would skip a candidate that is
// not baton's (or under Preferred, a key without a record) waits, or the
// term ended before.
func (s *Server) Transfer(ctx context.Context, req *connect.Request[batonv1.TransferRequest]) (*connect.Response[batonv1.TransferResponse], error) {
	h, err := s.termOf(ctx, req.Msg.GetHoldId())
	if err != nil {
		return nil, err
	}
	if err := checkTo(req.Msg.GetTo()); err != nil {
		return nil, err
	}
	tr := transferRequest{ctx: ctx, to: req.Msg.GetTo(), reply: make(chan transferReply, 1)}
	select {
	case h.transfers <- tr:
	case <-h.ended:
		return nil, notLeader(h)
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	r := <-tr.reply // the loop answers every request it takes
	switch err := r.err; {
	case err == nil:
	case errors.Is(err, election.ErrNoCandidate) && h.lock.Context().Err() == nil:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("to: %w", err))
	case errors.Is(err, errAmbiguous), errors.Is(err, election.ErrForeignCandidate), errors.Is(err, election.ErrStrategy):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("to: %w", err))
	case h.lock.Context().Err() != nil:
		// The term ended: lost, or resigned since the candidate left
		// (ErrNoCandidate after the check); the stream says which.
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the term ended before the hand-over: %w", err))
	case cmdutil.IsPermissionDenied(err):
		return nil, connect.NewError(connect.CodePermissionDenied, err)
	default:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	select {
	case <-h.ended:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	return connect.NewResponse(&batonv1.TransferResponse{Token: r.token}), nil
}

// termOf is holdOf for a term: FAILED_PRECONDITION for a lock's hold_id.
func (s *Server) termOf(ctx context.Context, id string) (*hold, error) {
	h, err := s.holdOf(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.transfers == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("hold_id: not a term's hold: Release it"))
	}
	return h, nil
}

// notLeader is the error of a call on a term that ended.
func notLeader(h *hold) error {
	h.mu.Lock()
	cause := h.cause
	h.mu.Unlock()
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: the term ended: %w", election.ErrNotLeader, cause))
}
