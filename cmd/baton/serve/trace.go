package serve

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/internal/telemetry"
)

// A Hold or Lead stream has a server span, "baton.v1.BatonService/Hold"
// (or /Lead), from its request to its end: the child of the caller's span
// when the request carries a W3C traceparent (and tracestate), and the
// parent of the library's spans of that acquisition ("mutex wait", "mutex
// hold", "election hold", ...). Its attributes say how the stream ended:
// baton.hold.outcome and baton.loss.reason (the cause's metric label), or
// the error code of a refused or failed wait.

// holdIDAttr is the hold_id of a held stream's span.
const holdIDAttr = attribute.Key("baton.hold.id")

// startSpan starts the span of a stream of method, parented by the
// traceparent in header when there is one.
func (s *Server) startSpan(ctx context.Context, header http.Header, method string) (context.Context, trace.Span) {
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(header))
	return s.tracer.Start(ctx, batonv1connect.BatonServiceName+"/"+method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.service", batonv1connect.BatonServiceName),
			attribute.String("rpc.method", method)))
}

// endSpan ends a stream's span with its handler's error.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		code := connect.CodeOf(err)
		span.SetAttributes(attribute.String("rpc.connect_rpc.error_code", code.String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// spanHeld records on ctx's span that the stream holds h.
func spanHeld(ctx context.Context, h *hold) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(holdIDAttr.String(h.id), telemetry.FencingToken.Int64(int64(h.lock.Token())))
	}
}

// spanEnded records on ctx's span how a held stream ended: released, or
// lost with the cause's label (stream_closed, heartbeat_timeout, ...).
func spanEnded(ctx context.Context, final batonv1.Cause) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if final == batonv1.Cause_CAUSE_RELEASED {
		span.SetAttributes(telemetry.HoldOutcome.String(telemetry.Released))
		return
	}
	span.SetAttributes(telemetry.HoldOutcome.String(telemetry.HoldLost), telemetry.LossReason.String(causeLabel(final)))
}
