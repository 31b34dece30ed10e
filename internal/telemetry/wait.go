package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Wait is the span of one acquisition call, from the call to its return.
// The zero Wait does nothing.
type Wait struct {
	t      Target
	parent context.Context
	span   trace.Span
}

// StartWait starts the wait span as a child of ctx's span, and returns the
// context to wait in. A nil or zero Target traces nothing.
func (t *Target) StartWait(ctx context.Context) (context.Context, Wait) {
	if !t.on() {
		return ctx, Wait{}
	}
	name, _, _ := t.names()
	wctx, span := t.tracer.Start(ctx, name)
	if !span.IsRecording() && !span.SpanContext().IsValid() {
		// A no-op provider's span (the global provider's until the
		// application installs one) under no trace: it carries nothing,
		// and its hold would be the same; neither is kept.
		return ctx, Wait{}
	}
	if span.IsRecording() {
		t.setAttributes(span)
	}
	return wctx, Wait{t: *t, parent: ctx, span: span}
}

// Enqueued records how many contenders were ahead when this one's key was
// written: 0 when it held at once.
func (w Wait) Enqueued(position int) {
	if w.Recording() {
		w.span.SetAttributes(LockQueuePosition.Int(position))
	}
}

// End ends a wait that did not acquire, with one of the outcomes busy,
// cancelled, refused, lost or error, and err as the reason. Refused, lost
// and error mark the span as failed; busy and cancelled are answers.
func (w Wait) End(outcome string, err error) {
	if w.span == nil {
		return
	}
	if w.span.IsRecording() {
		w.span.SetAttributes(LockOutcome.String(outcome))
		if err != nil && outcome != Busy && outcome != Cancelled {
			w.span.SetStatus(codes.Error, err.Error())
		}
	}
	w.span.End()
}

// Acquired ends the wait with the outcome acquired and starts the hold: a
// child of the context the wait was started with (the caller's), linked to
// the wait. token is the fencing token, lease the lease ID, key the
// holder's key, ttl the lease's granted TTL in seconds. It returns ctx
// carrying the hold's span when that has a trace (what runs under the hold
// is its child) and, when it is recorded, the Hold (HoldFrom finds it
// there too); a hold not recorded keeps no span: a held lock costs
// nothing then.
func (w Wait) Acquired(ctx context.Context, token, lease int64, key string, ttl int64) (context.Context, Hold) {
	if w.span == nil {
		return ctx, Hold{}
	}
	if w.span.IsRecording() {
		w.span.SetAttributes(LockOutcome.String(Acquired), FencingToken.Int64(token), LeaseID.String(leaseHex(lease)))
	}
	w.span.End()
	_, name, _ := w.t.names()
	_, span := w.t.tracer.Start(w.parent, name)
	if span.SpanContext().IsValid() {
		ctx = trace.ContextWithSpan(ctx, span)
	}
	if !span.IsRecording() {
		return ctx, Hold{}
	}
	w.t.setAttributes(span)
	span.SetAttributes(FencingToken.Int64(token), LeaseID.String(leaseHex(lease)), LockKey.String(key), LeaseTTL.Int64(ttl))
	if sc := w.span.SpanContext(); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
	t := w.t
	h := Hold{t: &t, span: span}
	return context.WithValue(ctx, holdKey{}, h), h
}

type holdKey struct{}

// HoldFrom returns the recorded Hold that Acquired put in ctx (or in a
// context derived from it); the zero Hold if none.
func HoldFrom(ctx context.Context) Hold {
	h, _ := ctx.Value(holdKey{}).(Hold)
	return h
}

// Recording reports whether the wait's span is recorded: compute what only
// its attributes need behind it.
func (w Wait) Recording() bool { return w.span != nil && w.span.IsRecording() }

// SpanContext is the wait span's, for an exemplar.
func (w Wait) SpanContext() trace.SpanContext {
	if w.span == nil {
		return trace.SpanContext{}
	}
	return w.span.SpanContext()
}
