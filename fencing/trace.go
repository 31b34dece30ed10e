package fencing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/telemetry"
)

// Guard kinds, the baton.fencing.guard attribute of a check's span.
const (
	guardMemory = "memory"
	guardEtcd   = "etcd"
	guardSQL    = "sql"
)

// startCheck starts the span of a check inside ctx's trace (none outside
// one: a check alone says nothing, and an untraced caller pays nothing).
func startCheck(ctx context.Context, tr trace.Tracer, name, guard, resource string, t Token) (context.Context, telemetry.Fence) {
	return telemetry.StartFence(ctx, tr, name, guard, resource, int64(t))
}

// endCheck ends a check's span with the outcome err says; t is the token
// presented, the high-water mark once admitted.
func endCheck(f telemetry.Fence, err error, t Token) {
	if !f.Recording() {
		f.End("", 0, nil)
		return
	}
	var stale *StaleError
	switch {
	case err == nil:
		f.End(telemetry.Admitted, int64(t), nil)
	case errors.As(err, &stale):
		f.End(telemetry.Stale, int64(stale.Highest), err)
	case errors.Is(err, ErrMalformed):
		f.End(telemetry.Malformed, 0, err)
	default:
		f.End(telemetry.Failed, 0, err)
	}
}

// propagator reads and writes the trace context of HTTP requests: the
// application's, or W3C Trace Context when it installed none.
func propagator() propagation.TextMapPropagator {
	if p := otel.GetTextMapPropagator(); len(p.Fields()) > 0 {
		return p
	}
	return propagation.TraceContext{}
}
