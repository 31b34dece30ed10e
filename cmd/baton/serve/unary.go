package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/shard"
)

// Heartbeat keeps a hold and returns its validity from this request's
// arrival: the caller adds it to its send time.
func (s *Server) Heartbeat(ctx context.Context, req *connect.Request[batonv1.HeartbeatRequest]) (*connect.Response[batonv1.HeartbeatResponse], error) {
	arrival := time.Now()
	h, err := s.holdOf(ctx, req.Msg.GetHoldId())
	if err != nil {
		s.metrics.heartbeats.WithLabelValues("unknown").Inc()
		return nil, err
	}
	validity, err := h.beat(arrival)
	if err != nil {
		s.metrics.heartbeats.WithLabelValues("lost").Inc()
		return nil, err
	}
	s.metrics.heartbeats.WithLabelValues("ok").Inc()
	resp := &batonv1.HeartbeatResponse{Validity: durationpb.New(validity)}
	if h.members != nil { // after beat: see tellDrainTimedOut
		resp.Lost = h.members.toldLostShards()
	}
	return connect.NewResponse(resp), nil
}

// Release ends a hold: the key is deleted in a transaction guarded by its
// token, and its stream ends with released. It returns once the delete is
// done; FAILED_PRECONDITION when the hold was lost before.
func (s *Server) Release(ctx context.Context, req *connect.Request[batonv1.ReleaseRequest]) (*connect.Response[batonv1.ReleaseResponse], error) {
	h, err := s.holdOf(ctx, req.Msg.GetHoldId())
	if err != nil {
		return nil, err
	}
	if err := s.release(ctx, h); err != nil {
		return nil, err
	}
	return connect.NewResponse(&batonv1.ReleaseResponse{}), nil
}

// release asks h's loop to release it (a term: resign) and waits for the
// delete.
func (s *Server) release(ctx context.Context, h *hold) error {
	h.requestRelease()
	if s.cfg.hooks != nil && s.cfg.hooks.releaseWaiting != nil {
		s.cfg.hooks.releaseWaiting(h.id)
	}
	select {
	case <-h.ended:
	case <-ctx.Done():
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	h.mu.Lock()
	cause := h.cause
	h.mu.Unlock()
	switch err := h.endErr; {
	case !errors.Is(cause, errReleasedByCaller) || errors.Is(cause, errTransferred):
		// It ended for another reason first (its stream said lost): the
		// caller did not hold it until now.
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the hold ended before the release: %w", cause))
	case err == nil:
		return nil
	case notHeld(err):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	default:
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the key will be deleted in the background: %w", err))
	}
}

// notHeld reports the library's error of an acquisition that was lost or
// released before the call, of any kind.
func notHeld(err error) bool {
	return errors.Is(err, mutex.ErrNotHeld) || errors.Is(err, semaphore.ErrNotHeld) || errors.Is(err, rwmutex.ErrNotHeld) ||
		errors.Is(err, election.ErrNotLeader) || errors.Is(err, shard.ErrNotHeld)
}

// holdOf finds a live hold by id, for its owner: NOT_FOUND for an unknown
// id, PERMISSION_DENIED for a caller the transport proves is another.
func (s *Server) holdOf(ctx context.Context, id string) (*hold, error) {
	if err := checkHoldID(id); err != nil {
		return nil, err
	}
	h := s.holds.get(id)
	if h == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("hold_id: no such hold (it ended, or never was)"))
	}
	if h.principal != "" && callerOf(ctx).principal() != h.principal {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("hold_id: the hold belongs to another caller"))
	}
	return h, nil
}
