package cmdutil

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestExportRequestedFollowsTheOTELEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
		says string // a fragment of the stderr line; empty: silent
	}{
		{"nothing set", nil, false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, true, ""},
		{"grpc said", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "TRUE"}, false, ""},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{"other exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "zipkin"}, false, "only otlp"},
		{"http protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, false, "only grpc"},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, true, ""},
		{"escaped", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "a\x1b[2Jb"}, false, `a\x1b[2Jb`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got := exportRequested(func(k string) string { return tc.env[k] }, &out)
			if got != tc.want {
				t.Fatalf("exportRequested = %v, want %v", got, tc.want)
			}
			if tc.says == "" && out.Len() > 0 || !strings.Contains(out.String(), tc.says) {
				t.Fatalf("said %q, want %q", out.String(), tc.says)
			}
			if strings.ContainsRune(out.String(), 0x1b) {
				t.Fatalf("printed an escape: %q", out.String())
			}
		})
	}
}

func TestTraceEnvRoundTripsThroughTheEnvironment(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	env := map[string]string{"TRACEPARENT": tp, "TRACESTATE": "vendor=a"}
	tr := StartTracing(context.Background(), func(k string) string { return env[k] }, &bytes.Buffer{})
	defer tr.Flush(&bytes.Buffer{})
	if !tr.parent.IsValid() || !tr.parent.IsRemote() || tr.parent.TraceState().Get("vendor") != "a" {
		t.Fatalf("parent %v", tr.parent)
	}
	if tr.sdk != nil {
		t.Fatal("an exporter without an endpoint")
	}
	ctx, span := tr.StartCommand(context.Background(), "baton lock")
	defer span.End()
	got := TraceEnv(ctx)
	if want := []string{"TRACEPARENT=" + tp, "TRACESTATE=vendor=a"}; !slices.Equal(got, want) {
		t.Fatalf("traceEnv = %q, want %q: without an exporter the trace passes through", got, want)
	}
	if got := TraceEnv(context.Background()); len(got) != 0 {
		t.Fatalf("traceEnv without a trace = %q", got)
	}
	if tr := StartTracing(context.Background(), func(string) string { return "" }, &bytes.Buffer{}); tr.parent.IsValid() {
		t.Fatal("a parent from an empty environment")
	}
	bad := StartTracing(context.Background(), func(k string) string {
		return map[string]string{"TRACEPARENT": "00-zz-00f067aa0ba902b7-01"}[k]
	}, &bytes.Buffer{})
	if bad.parent.IsValid() || trace.SpanContextFromContext(context.Background()).IsValid() {
		t.Fatal("a malformed TRACEPARENT was taken")
	}
}
