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
//
// Every unary call (Heartbeat, Release, Resign, Transfer, Drained, Inspect,
// Fence) and every Observe stream has a server span of the same name
// ("baton.v1.BatonService/Heartbeat", ...), parented the same way, started
// by spans, an interceptor: with the error code of a failed call, and the
// hold_id the request names (a Fence write's). A heartbeat is frequent:
// its span's options are built once per method, and its attributes are
// set only when the span records.

// holdIDAttr is the hold_id of a held stream's span.
const holdIDAttr = attribute.Key("baton.hold.id")

// spanMethod is what a method's span starts with: its name and options.
type spanMethod struct {
	name string
	opts []trace.SpanStartOption
}

// spanMethods are every method's, by method name ("Heartbeat") and by
// procedure ("/baton.v1.BatonService/Heartbeat").
var spanMethods = func() map[string]*spanMethod {
	m := make(map[string]*spanMethod)
	methods := batonv1.File_baton_v1_baton_proto.Services().ByName("BatonService").Methods()
	for i := range methods.Len() {
		method := string(methods.Get(i).Name())
		sm := newSpanMethod(method)
		m[method], m["/"+sm.name] = sm, sm
	}
	return m
}()

func newSpanMethod(method string) *spanMethod {
	return &spanMethod{name: batonv1connect.BatonServiceName + "/" + method, opts: []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.service", batonv1connect.BatonServiceName),
			attribute.String("rpc.method", method)),
	}}
}

// startSpan starts the span of a stream of method, parented by the
// traceparent in header when there is one.
func (s *Server) startSpan(ctx context.Context, header http.Header, method string) (context.Context, trace.Span) {
	sm := spanMethods[method]
	if sm == nil {
		sm = newSpanMethod(method)
	}
	return s.start(ctx, header, sm)
}

func (s *Server) start(ctx context.Context, header http.Header, sm *spanMethod) (context.Context, trace.Span) {
	if len(header["Traceparent"]) != 0 { // canonical: no allocation when absent
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(header))
	}
	return s.tracer.Start(ctx, sm.name, sm.opts...)
}

// spans is the interceptor of the unary calls' and Observe's spans (Hold
// and Lead start theirs in their handlers, Shards has none yet).
type spans struct{ s *Server }

// holdIDer is a request that names a hold.
type holdIDer interface{ GetHoldId() string }

// holdIDOf is the hold_id msg names, or "".
func holdIDOf(msg any) string {
	switch m := msg.(type) {
	case holdIDer:
		return m.GetHoldId()
	case *batonv1.FenceRequest:
		return m.GetWrite().GetHoldId()
	}
	return ""
}

func (i spans) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		sm := spanMethods[req.Spec().Procedure]
		if sm == nil {
			return next(ctx, req)
		}
		ctx, span := i.s.start(ctx, req.Header(), sm)
		resp, err := next(ctx, req)
		if span.IsRecording() {
			if id := holdIDOf(req.Any()); id != "" {
				span.SetAttributes(holdIDAttr.String(id))
			}
		}
		endSpan(span, err)
		return resp, err
	}
}

func (spans) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i spans) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	observe := spanMethods[batonv1connect.BatonServiceObserveProcedure]
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().Procedure != batonv1connect.BatonServiceObserveProcedure {
			return next(ctx, conn)
		}
		ctx, span := i.s.start(ctx, conn.RequestHeader(), observe)
		err := next(ctx, conn)
		endSpan(span, err)
		return err
	}
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
