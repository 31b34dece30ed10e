package cmdutil

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batonhq/baton/internal/telemetry"
)

// baton lock and baton elect export their spans over OTLP/gRPC when the
// standard OpenTelemetry environment names an endpoint, and export nothing
// otherwise. The exporter reads the other OTEL_EXPORTER_OTLP_* variables
// itself (headers, certificates, insecure, timeout, compression), the SDK
// OTEL_TRACES_SAMPLER and OTEL_BSP_*, and the resource OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES. A TRACEPARENT (and TRACESTATE) in baton's
// environment makes its spans part of that trace; the command run under
// the hold gets the hold's.

// tracingFlushTimeout bounds the export of the last spans on the way out,
// so that an unreachable collector does not hold up baton's exit.
const tracingFlushTimeout = 5 * time.Second

// tracing is one command's tracer provider and its flush.
type tracing struct {
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil without an exporter
	parent   trace.SpanContext        // from TRACEPARENT, if any
}

// StartTracing sets up the exporter that getenv's OTEL_* variables ask
// for, or none; a configuration it cannot serve is said on errOut and
// exports nothing, as tracing must never keep a lock from being taken.
func StartTracing(ctx context.Context, getenv func(string) string, errOut io.Writer) *tracing {
	t := &tracing{Provider: noop.NewTracerProvider()}
	pctx := propagation.TraceContext{}.Extract(context.Background(), envCarrier(getenv))
	t.parent = trace.SpanContextFromContext(pctx)
	if !exportRequested(getenv, errOut) {
		return t
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		fmt.Fprintf(errOut, "baton: traces are not exported: %s\n", Safe(err.Error()))
		return t
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "baton")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES) still
		// names the service.
		fmt.Fprintf(errOut, "baton: traces: resource: %s\n", Safe(err.Error()))
	}
	t.sdk = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.Provider = t.sdk
	return t
}

// exportRequested reports whether the environment asks for an OTLP export
// of traces that baton can make (gRPC only), saying why not when it asks
// for another one.
func exportRequested(getenv func(string) string, errOut io.Writer) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "", "otlp":
	case "none":
		return false
	default:
		fmt.Fprintf(errOut, "baton: OTEL_TRACES_EXPORTER=%s: only otlp is supported; traces are not exported\n", Safe(e))
		return false
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p := strings.TrimSpace(proto); p != "" && p != "grpc" {
		fmt.Fprintf(errOut, "baton: OTEL_EXPORTER_OTLP_PROTOCOL=%s: only grpc is supported; traces are not exported\n", Safe(p))
		return false
	}
	return true
}

// Flush exports the spans still buffered, within tracingFlushTimeout, and
// stops the exporter.
func (t *tracing) Flush(errOut io.Writer) {
	if t.sdk == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := t.sdk.Shutdown(ctx); err != nil {
		fmt.Fprintf(errOut, "baton: traces: %s\n", Safe(err.Error()))
	}
}

// StartCommand starts the span of the whole command ("baton lock"), a
// child of TRACEPARENT's span when baton got one, in ctx.
func (t *tracing) StartCommand(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, t.parent)
	}
	return t.Provider.Tracer(telemetry.ScopeName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// EndCommand ends the command's span with the exit status err means.
func EndCommand(span trace.Span, err error) {
	code := ExitCode(err)
	span.SetAttributes(attribute.Int("process.exit.code", code))
	if code != ExitOK {
		msg := fmt.Sprintf("exit status %d", code)
		if err != nil && err.Error() != "" {
			msg = err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// TraceEnv is TRACEPARENT (and TRACESTATE) for a child process, naming
// ctx's span as its parent; none when ctx carries no trace.
func TraceEnv(ctx context.Context) []string {
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	var env []string
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := m[k]; v != "" {
			env = append(env, strings.ToUpper(k)+"="+v)
		}
	}
	return env
}

// envCarrier reads a trace context from environment variables, whose
// names are the header names in upper case (TRACEPARENT, TRACESTATE).
type envCarrier func(string) string

func (e envCarrier) Get(key string) string { return e(strings.ToUpper(key)) }
func (e envCarrier) Set(string, string)    {}
func (e envCarrier) Keys() []string        { return []string{"TRACEPARENT", "TRACESTATE"} }
