package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Hold is the recorded span of one acquisition, from its return to its
// release or loss; the zero Hold (a span not recorded) does nothing. Its
// methods may be called from any goroutine; after the end, they do
// nothing.
type Hold struct {
	t    *Target
	span trace.Span
}

// SpanContext is the hold span's, for an exemplar or a child process.
func (h Hold) SpanContext() trace.SpanContext {
	if h.span == nil {
		return trace.SpanContext{}
	}
	return h.span.SpanContext()
}

// Recording reports whether the hold's span is recorded.
func (h Hold) Recording() bool { return h.span != nil && h.span.IsRecording() }

// RenewalFailed records a failed lease renewal.
func (h Hold) RenewalFailed(err error) {
	if h.Recording() {
		h.span.AddEvent(EventRenewalFailed, trace.WithAttributes(errAttr(err)))
	}
}

// ReleaseRequested records a request to release, by requester (may be
// empty).
func (h Hold) ReleaseRequested(requester string) {
	if h.Recording() {
		h.span.AddEvent(EventReleaseRequested, trace.WithAttributes(ReleaseRequester.String(requester)))
	}
}

// Preempted records that a better candidate asked the holder to end its
// term.
func (h Hold) Preempted(candidate string) {
	if h.Recording() {
		h.span.AddEvent(EventPreempted, trace.WithAttributes(ElectionCandidate.String(candidate)))
	}
}

// Released ends the hold with the outcome released.
func (h Hold) Released() { h.end(Released) }

// TransferredTo ends the hold with the outcome transferred.
func (h Hold) TransferredTo(candidate string) {
	if h.Recording() {
		h.span.SetAttributes(ElectionCandidate.String(candidate))
	}
	h.end(Transferred)
}

// Lost ends the hold with the outcome lost: an event with the reason (the
// metrics' label value) and the cause, and an error status.
func (h Hold) Lost(reason string, cause error) {
	if h.Recording() {
		h.span.AddEvent(EventLost, trace.WithAttributes(LossReason.String(reason), LossCause.String(msg(cause))))
		h.span.SetStatus(codes.Error, "lost: "+reason)
	}
	h.end(HoldLost)
}

func (h Hold) end(outcome string) {
	if h.span == nil {
		return
	}
	if h.span.IsRecording() {
		h.span.SetAttributes(HoldOutcome.String(outcome))
	}
	h.span.End()
}

// Op is the span of a release, resignation or transfer call. The zero Op
// does nothing.
type Op struct{ span trace.Span }

// StartRelease starts the span of a release (an election's resignation) of
// h, as a child of ctx's span linked to the hold.
func (t *Target) StartRelease(ctx context.Context, h Hold) (context.Context, Op) {
	if !t.on() {
		return ctx, Op{}
	}
	_, _, name := t.names()
	return t.StartOp(ctx, name, h)
}

// StartRelease starts the span of the hold's release (an election's
// resignation), as a child of ctx's span linked to the hold; none when the
// hold is not recorded.
func (h Hold) StartRelease(ctx context.Context) (context.Context, Op) {
	if h.t == nil {
		return ctx, Op{}
	}
	return h.t.StartRelease(ctx, h)
}

// StartOp starts a span named name about h (such as "election transfer"),
// as a child of ctx's span linked to the hold.
func (t *Target) StartOp(ctx context.Context, name string, h Hold) (context.Context, Op) {
	if !t.on() {
		return ctx, Op{}
	}
	octx, span := t.tracer.Start(ctx, name)
	if span.IsRecording() {
		t.setAttributes(span)
		if sc := h.SpanContext(); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return octx, Op{span: span}
}

// End ends the operation; a non-nil err marks it failed.
func (o Op) End(err error) {
	if o.span == nil {
		return
	}
	if err != nil && o.span.IsRecording() {
		o.span.SetStatus(codes.Error, err.Error())
	}
	o.span.End()
}

// StartTransfer starts the span of a hand-over of the hold (whose token is
// token) to candidate, as a child of ctx's span linked to the hold; none
// when the hold is not recorded. End it with EndTransfer.
func (h Hold) StartTransfer(ctx context.Context, token int64, candidate string) (context.Context, Op) {
	if h.t == nil {
		return ctx, Op{}
	}
	ctx, op := h.t.StartOp(ctx, "election transfer", h)
	if op.span.IsRecording() {
		op.span.SetAttributes(FencingToken.Int64(token), ElectionCandidate.String(candidate))
	}
	return ctx, op
}

// EndTransfer ends a transfer's span with its outcome (a Transfer*
// value) and, when it succeeded, the successor's token; any outcome but
// TransferDone marks it failed with err.
func (o Op) EndTransfer(outcome string, successor int64, err error) {
	if o.span == nil {
		return
	}
	if o.span.IsRecording() {
		o.span.SetAttributes(TransferOutcome.String(outcome))
		if successor > 0 {
			o.span.SetAttributes(SuccessorToken.Int64(successor))
		}
	}
	if outcome == TransferDone {
		err = nil
	}
	o.End(err)
}
