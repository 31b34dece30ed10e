package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span names of a guard's checks.
const (
	SpanAdmit = "fencing admit"
	SpanWrite = "fencing write"
)

// Fence is the span of one guard check. The zero Fence does nothing.
type Fence struct{ span trace.Span }

// StartFence starts the span of a guard check named name, by the guard
// kind guard (memory, etcd, sql), of token for resource — but only inside
// a trace (ctx carries a valid span context, local or remote): a check is
// a step of some write, and a trace of its own would say nothing, while
// an untraced caller pays nothing.
func StartFence(ctx context.Context, tr trace.Tracer, name, guard, resource string, token int64) (context.Context, Fence) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, Fence{}
	}
	fctx, span := tr.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(FencingGuard.String(guard), FencingResource.String(resource), FencingToken.Int64(token))
	}
	return fctx, Fence{span: span}
}

// End ends the check with outcome (admitted, stale, malformed or error),
// the resource's high-water mark when known (zero: unknown), and err for
// an outcome other than admitted. A stale token marks the span failed: it
// is the write of a holder that lost its lock.
func (f Fence) End(outcome string, high int64, err error) {
	if f.span == nil {
		return
	}
	if f.span.IsRecording() {
		f.span.SetAttributes(FencingOutcome.String(outcome))
		if high > 0 {
			f.span.SetAttributes(FencingHighWater.Int64(high))
		}
		if err != nil {
			f.span.SetStatus(codes.Error, err.Error())
		}
	}
	f.span.End()
}

// Recording reports whether the check's span is recorded.
func (f Fence) Recording() bool { return f.span != nil && f.span.IsRecording() }
