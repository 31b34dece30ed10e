package serve_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
)

// holdWith is holdOn with the request's headers set by header.
func holdWith(ctx context.Context, c batonv1connect.BatonServiceClient, req *batonv1.HoldRequest, header map[string]string) *stream {
	return &stream{open(ctx, 16, func(ctx context.Context) (*connect.ServerStreamForClient[batonv1.HoldResponse], error) {
		r := connect.NewRequest(req)
		for k, v := range header {
			r.Header().Set(k, v)
		}
		return c.Hold(ctx, r)
	})}
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// The caller's W3C traceparent parents the stream's server span, whose
// children are the library's wait and hold spans; the server span says
// how the hold ended: released, or lost with the cause.
func TestTraceparentParentsTheHoldSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := start(t, func(c *serve.Config) { c.TracerProvider = tp })
	ctx := ctxT(t)

	for _, c := range []struct {
		name, traceparent, outcome, reason string
		end                                func(s *stream, h *batonv1.Held)
	}{
		{"released", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "released", "", func(s *stream, h *batonv1.Held) {
			if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
				t.Fatal(err)
			}
			if m := s.next(t); m.GetReleased() == nil {
				t.Fatalf("%v, want released", m)
			}
		}},
		{"heartbeat timeout", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "lost", "heartbeat_timeout", func(s *stream, _ *batonv1.Held) {
			if m := s.next(t); m.GetLost().GetCause() != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT {
				t.Fatalf("%v, want lost HEARTBEAT_TIMEOUT", m)
			}
		}},
	} {
		rec.Reset()
		s := holdWith(ctx, e.client, &batonv1.HoldRequest{Names: []string{"traced"}, Ttl: dur(2 * time.Second)}, map[string]string{"traceparent": c.traceparent})
		h := s.held(t)
		c.end(s, h)
		if err := s.end(t); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		byName := map[string]sdktrace.ReadOnlySpan{}
		clitest.WaitFor(t, func() bool {
			for _, sp := range rec.Ended() {
				byName[sp.Name()] = sp
			}
			return byName["baton.v1.BatonService/Hold"] != nil && byName["mutex hold"] != nil && byName["mutex wait"] != nil
		})
		srv := byName["baton.v1.BatonService/Hold"]
		parent := srv.Parent()
		if !parent.IsRemote() || parent.TraceID().String() != c.traceparent[3:35] || parent.SpanID().String() != c.traceparent[36:52] {
			t.Fatalf("%s: server span's parent %v, want the traceparent %s", c.name, parent, c.traceparent)
		}
		if srv.SpanKind() != trace.SpanKindServer || attrOf(srv, "baton.hold.id") != h.HoldId || attrOf(srv, "baton.fencing.token") == "" {
			t.Fatalf("%s: server span %s kind %v, attributes %v", c.name, srv.Name(), srv.SpanKind(), srv.Attributes())
		}
		if got := attrOf(srv, "baton.hold.outcome"); got != c.outcome || attrOf(srv, "baton.loss.reason") != c.reason {
			t.Fatalf("%s: outcome %q, reason %q; want %q, %q", c.name, got, attrOf(srv, "baton.loss.reason"), c.outcome, c.reason)
		}
		for _, name := range []string{"mutex wait", "mutex hold"} {
			sp := byName[name]
			if sp.Parent().SpanID() != srv.SpanContext().SpanID() || sp.SpanContext().TraceID() != srv.SpanContext().TraceID() {
				t.Fatalf("%s: %s's parent %v, want the server span %v", c.name, name, sp.Parent(), srv.SpanContext())
			}
		}
		if tok := attrOf(byName["mutex hold"], "baton.fencing.token"); tok != attrOf(srv, "baton.fencing.token") {
			t.Fatalf("%s: hold span's token %s, server span's %s", c.name, tok, attrOf(srv, "baton.fencing.token"))
		}
	}

	// Without a traceparent the stream's span starts a trace of its own.
	rec.Reset()
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"untraced"}})
	s.held(t)
	s.cancel()
	clitest.WaitFor(t, func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == "baton.v1.BatonService/Hold" {
				if sp.Parent().IsValid() {
					t.Fatalf("parent %v without a traceparent", sp.Parent())
				}
				return attrOf(sp, "baton.loss.reason") == "stream_closed"
			}
		}
		return false
	})
}

// Every unary call and every Observe stream has a server span named as
// the streams' are, the child of the caller's traceparent, with the
// hold_id its request names and the error code of a failed call.
func TestTraceparentParentsTheUnaryAndObserveSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := start(t, func(c *serve.Config) { c.TracerProvider = tp })
	ctx := ctxT(t)
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"unary-traced"}})
	h := s.held(t)
	const unknown = "0123456789abcdef0123456789abcdef"

	// with sets the traceparent of the i-th call on r.
	with := func(i int, r interface{ Header() http.Header }) string {
		tp := fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e%04x-00f067aa0ba9%04x-01", i, i)
		r.Header().Set("traceparent", tp)
		return tp
	}
	type call struct {
		method, holdID string
		call           func(tp int) (traceparent string, err error)
	}
	unary := func(method, holdID string, f func(tp int) (string, error)) call { return call{method, holdID, f} }
	for i, c := range []call{
		unary("Heartbeat", h.HoldId, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId})
			tp := with(i, r)
			_, err := e.client.Heartbeat(ctx, r)
			return tp, err
		}),
		unary("Heartbeat", unknown, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: unknown})
			tp := with(i, r)
			_, err := e.client.Heartbeat(ctx, r)
			return tp, err
		}),
		unary("Resign", h.HoldId, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.ResignRequest{HoldId: h.HoldId})
			tp := with(i, r)
			_, err := e.client.Resign(ctx, r)
			return tp, err
		}),
		unary("Transfer", unknown, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.TransferRequest{HoldId: unknown, To: "someone"})
			tp := with(i, r)
			_, err := e.client.Transfer(ctx, r)
			return tp, err
		}),
		unary("Drained", unknown, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.DrainedRequest{HoldId: unknown, Shard: 1})
			tp := with(i, r)
			_, err := e.client.Drained(ctx, r)
			return tp, err
		}),
		unary("Inspect", "", func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_LocksPrefix{LocksPrefix: ""}})
			tp := with(i, r)
			_, err := e.client.Inspect(ctx, r)
			return tp, err
		}),
		unary("Fence", "", func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.FenceRequest{Resource: "traced", Op: &batonv1.FenceRequest_CheckToken{CheckToken: 1}})
			tp := with(i, r)
			_, err := e.client.Fence(ctx, r)
			return tp, err
		}),
		unary("Fence", unknown, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.FenceRequest{Resource: "traced", Op: &batonv1.FenceRequest_Write{Write: &batonv1.FencedWrite{
				HoldId: unknown, Puts: []*batonv1.KeyValue{{Key: "k", Value: []byte("v")}}}}})
			tp := with(i, r)
			_, err := e.client.Fence(ctx, r)
			return tp, err
		}),
		unary("Observe", "", func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.ObserveRequest{Kind: batonv1.ObjectKind_OBJECT_KIND_LOCK, Name: "unary-traced"})
			tp := with(i, r)
			o := open(ctx, 4, func(ctx context.Context) (*connect.ServerStreamForClient[batonv1.ObserveResponse], error) {
				return e.client.Observe(ctx, r)
			})
			if m := o.next(t); m.GetHolder().GetToken() != h.Token {
				t.Fatalf("observe: %v, want the holder of token %d", m, h.Token)
			}
			o.cancel()
			return tp, nil
		}),
		unary("Release", h.HoldId, func(i int) (string, error) {
			r := connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})
			tp := with(i, r)
			_, err := e.client.Release(ctx, r)
			return tp, err
		}),
	} {
		rec.Reset()
		traceparent, err := c.call(i)
		name := "baton.v1.BatonService/" + c.method
		var srv sdktrace.ReadOnlySpan
		clitest.WaitFor(t, func() bool {
			for _, sp := range rec.Ended() {
				if sp.Name() == name {
					srv = sp
				}
			}
			return srv != nil
		})
		parent := srv.Parent()
		if !parent.IsRemote() || parent.TraceID().String() != traceparent[3:35] || parent.SpanID().String() != traceparent[36:52] {
			t.Fatalf("%d %s: parent %v, want the traceparent %s", i, c.method, parent, traceparent)
		}
		if srv.SpanKind() != trace.SpanKindServer || attrOf(srv, "rpc.method") != c.method || attrOf(srv, "baton.hold.id") != c.holdID {
			t.Fatalf("%d %s: kind %v, attributes %v; want hold_id %q", i, c.method, srv.SpanKind(), srv.Attributes(), c.holdID)
		}
		wantCode := ""
		if err != nil {
			wantCode = connect.CodeOf(err).String()
		}
		if c.method == "Observe" {
			wantCode = attrOf(srv, "rpc.connect_rpc.error_code") // the caller's cancel, as the server saw it
		}
		if got := attrOf(srv, "rpc.connect_rpc.error_code"); got != wantCode || (wantCode != "") != (srv.Status().Code == codes.Error) {
			t.Fatalf("%d %s: error code %q, status %v; the call's error %v", i, c.method, got, srv.Status(), err)
		}
		t.Logf("%s: %v (code %q)", name, err, wantCode)
	}
	if m := s.next(t); m.GetReleased() == nil {
		t.Fatalf("%v, want released", m)
	}
}
