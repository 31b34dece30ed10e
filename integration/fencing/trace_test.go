package fencing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/fencing"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// check is what a test expects of one guard-check span.
type check struct {
	name, guard, outcome string
	token, high          int64
}

func wantChecks(t *testing.T, spans []sdktrace.ReadOnlySpan, parent trace.SpanContext, want []check) {
	t.Helper()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, s := range spans {
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			a[kv.Key] = kv.Value
		}
		got := check{s.Name(), a["baton.fencing.guard"].AsString(), a["baton.fencing.outcome"].AsString(),
			a["baton.fencing.token"].AsInt64(), a["baton.fencing.high_water"].AsInt64()}
		if got != want[i] || a["baton.fencing.resource"].AsString() != "ledger" {
			t.Errorf("span %d: %+v resource %q, want %+v", i, got, a["baton.fencing.resource"].AsString(), want[i])
		}
		if s.Parent().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() {
			t.Errorf("span %d: parent %v, want the caller's %v", i, s.Parent(), parent)
		}
		if failed := s.Status().Code == codes.Error; failed != (got.outcome != "admitted") {
			t.Errorf("span %d: status %v for outcome %s", i, s.Status(), got.outcome)
		}
	}
}

func TestGuardChecksAreSpansOfTheCallersTrace(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	for _, tc := range []struct {
		name  string
		guard string
		admit func(t *testing.T, tp trace.TracerProvider) func(ctx context.Context, tok fencing.Token) error
	}{
		{"memory", "memory", func(t *testing.T, tp trace.TracerProvider) func(context.Context, fencing.Token) error {
			g, err := fencing.NewMemoryGuardWith(fencing.WithTracerProvider(tp))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, tok fencing.Token) error { return g.Admit(ctx, "ledger", tok) }
		}},
		{"etcd", "etcd", func(t *testing.T, tp trace.TracerProvider) func(context.Context, fencing.Token) error {
			g := newEtcdGuard(t, fencing.WithNamespace(freshNS("trace")), fencing.WithTracerProvider(tp))
			return func(ctx context.Context, tok fencing.Token) error { return g.Admit(ctx, "ledger", tok) }
		}},
		{"sqlite", "sql", func(t *testing.T, tp trace.TracerProvider) func(context.Context, fencing.Token) error {
			b := sqlBackends()[0]
			db := b.open(t)
			g := newSQLGuard(t, b, db, fencing.WithTracerProvider(tp))
			return func(ctx context.Context, tok fencing.Token) error { return admitTx(ctx, db, g, "ledger", tok) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, tp := recorder(t)
			admit := tc.admit(t, tp)
			// Outside a trace: checked, not traced.
			if err := admit(ctx, 10); err != nil {
				t.Fatal(err)
			}
			wctx, write := tp.Tracer("test").Start(ctx, "zombie write")
			if err := admit(wctx, 12); err != nil {
				t.Fatal(err)
			}
			if err := admit(wctx, 11); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("Admit(11) = %v, want ErrStale", err)
			}
			if err := admit(wctx, 0); !errors.Is(err, fencing.ErrMalformed) {
				t.Fatalf("Admit(0) = %v, want ErrMalformed", err)
			}
			write.End()
			var checks []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() != "zombie write" {
					checks = append(checks, s)
				}
			}
			wantChecks(t, checks, write.SpanContext(), []check{
				{"fencing admit", tc.guard, "admitted", 12, 12},
				{"fencing admit", tc.guard, "stale", 11, 12},
				{"fencing admit", tc.guard, "malformed", 0, 0},
			})
		})
	}
}

func TestEtcdGuardWriteIsASpan(t *testing.T) {
	rec, tp := recorder(t)
	cli := srv.Client(t)
	g := newEtcdGuard(t, fencing.WithNamespace(freshNS("trace-write")), fencing.WithTracerProvider(tp))
	ctx := ctxTimeout(t, 10*time.Second)
	wctx, root := tp.Tracer("test").Start(ctx, "job")
	if _, err := g.Write(wctx, rawHolder{cli, 20}, "ledger", clientv3.OpPut(freshNS("/trace-data"), "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(wctx, rawHolder{cli, 19}, "ledger", clientv3.OpPut(freshNS("/trace-data"), "x")); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("stale Write = %v, want ErrStale", err)
	}
	root.End()
	wantChecks(t, rec.Ended()[:2], root.SpanContext(), []check{
		{"fencing write", "etcd", "admitted", 20, 20},
		{"fencing write", "etcd", "stale", 19, 20},
	})
}

// A zombie's request carries its trace through Transport; Middleware
// reads it, so the rejection is a span of the zombie's trace, and the
// handler runs in the caller's trace too.
func TestMiddlewareRejectionJoinsTheCallersTrace(t *testing.T) {
	rec, tp := recorder(t)
	g, err := fencing.NewMemoryGuardWith(fencing.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var inHandler trace.SpanContext
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = trace.SpanContextFromContext(r.Context())
	})
	srvHTTP := httptest.NewServer(fencing.Middleware(g, func(*http.Request) (string, error) { return "ledger", nil })(handler))
	t.Cleanup(srvHTTP.Close)

	// The caller is another process: its spans are not this recorder's.
	caller := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = caller.Shutdown(context.Background()) })
	tok := fencing.Token(30)
	client := &http.Client{Transport: &fencing.Transport{Token: func() fencing.Token { return tok }}}
	send := func(ctx context.Context) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srvHTTP.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("traceparent") != "" {
			t.Fatal("Transport modified the caller's request")
		}
		return resp.StatusCode
	}
	ctx := ctxTimeout(t, 10*time.Second)
	current, span := caller.Tracer("holder").Start(ctx, "current holder writes")
	if code := send(current); code != 200 {
		t.Fatalf("status %d, want 200", code)
	}
	span.End()
	if !inHandler.IsValid() || inHandler.TraceID() != span.SpanContext().TraceID() || !inHandler.IsRemote() {
		t.Fatalf("the handler ran in %v, want the caller's trace %v", inHandler, span.SpanContext().TraceID())
	}

	tok = 29
	zombie, zspan := caller.Tracer("holder").Start(ctx, "zombie writes")
	if code := send(zombie); code != http.StatusConflict {
		t.Fatalf("status %d, want 409", code)
	}
	zspan.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 checks", len(spans))
	}
	wantChecks(t, spans[:1], span.SpanContext(), []check{{"fencing admit", "memory", "admitted", 30, 30}})
	wantChecks(t, spans[1:], zspan.SpanContext(), []check{{"fencing admit", "memory", "stale", 29, 30}})

	// Without trace headers nothing is traced, and nothing breaks.
	if code := send(ctx); code != http.StatusConflict {
		t.Fatalf("untraced status %d, want 409", code)
	}
	if len(rec.Ended()) != 2 {
		t.Fatal("an untraced request was traced")
	}
}

// The application's tracing middleware already continues the caller's
// trace: Middleware keeps that span as the parent.
func TestMiddlewareKeepsASpanAlreadyInTheRequest(t *testing.T) {
	rec, tp := recorder(t)
	g, err := fencing.NewMemoryGuardWith(fencing.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	mw := fencing.Middleware(g, func(*http.Request) (string, error) { return "ledger", nil })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	sctx, server := tp.Tracer("app").Start(context.Background(), "PUT /ledger")
	req := httptest.NewRequestWithContext(sctx, http.MethodPut, "/ledger", nil)
	req.Header.Set(fencing.Header, "5")
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	mw.ServeHTTP(httptest.NewRecorder(), req)
	server.End()
	var admit sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "fencing admit" {
			admit = s
		}
	}
	if admit == nil || admit.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatalf("the check's parent is not the application's server span")
	}
}
