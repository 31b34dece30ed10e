package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Target is one lock, election, semaphore or read/write lock as its spans
// describe it. Build it once per object: its attributes are shared by
// every span, never copied.
type Target struct {
	tracer                      trace.Tracer
	attrs                       []attribute.KeyValue
	waitName, holdName, relName string
}

// NewTarget describes the object primitive ns/name, traced through tp (nil:
// the global provider). extra are more attributes of every span, such as
// baton.lock.mode or baton.semaphore.limit.
func NewTarget(tp trace.TracerProvider, primitive, ns, name string, extra ...attribute.KeyValue) *Target {
	rel := primitive + " release"
	if primitive == Election {
		rel = "election resign"
	}
	attrs := append([]attribute.KeyValue{
		LockPrimitive.String(primitive), LockNamespace.String(ns), LockName.String(name),
	}, extra...)
	return &Target{tracer: Tracer(tp), attrs: attrs,
		waitName: primitive + " wait", holdName: primitive + " hold", relName: rel}
}

// Wait is the span of one acquisition call, from the call to its return.
// The zero Wait does nothing.
type Wait struct {
	t      *Target
	parent context.Context
	span   trace.Span
}

// StartWait starts the wait span as a child of ctx's span, and returns the
// context to wait in. A nil Target traces nothing (the baseline of the
// benchmarks).
func (t *Target) StartWait(ctx context.Context) (context.Context, Wait) {
	if t == nil {
		return ctx, Wait{}
	}
	wctx, span := t.tracer.Start(ctx, t.waitName)
	if span.IsRecording() {
		span.SetAttributes(t.attrs...)
	}
	return wctx, Wait{t: t, parent: ctx, span: span}
}

// Enqueued records how many contenders were ahead when this one's key was
// written: 0 when it held at once.
func (w Wait) Enqueued(position int) {
	if w.span != nil && w.span.IsRecording() {
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
// holder's key, ttl the lease's granted TTL in seconds.
func (w Wait) Acquired(token, lease int64, key string, ttl int64) Hold {
	if w.span == nil {
		return Hold{}
	}
	recording := w.span.IsRecording()
	if recording {
		w.span.SetAttributes(LockOutcome.String(Acquired), FencingToken.Int64(token), LeaseID.String(leaseHex(lease)))
	}
	w.span.End()
	_, span := w.t.tracer.Start(w.parent, w.t.holdName)
	if span.IsRecording() {
		span.SetAttributes(w.t.attrs...)
		span.SetAttributes(FencingToken.Int64(token), LeaseID.String(leaseHex(lease)), LockKey.String(key), LeaseTTL.Int64(ttl))
		if sc := w.span.SpanContext(); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return Hold{t: w.t, span: span}
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
