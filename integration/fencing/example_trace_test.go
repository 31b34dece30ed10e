package fencing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton/fencing"
)

// A zombie holder's write, rejected by the resource's middleware, shows in
// the zombie's own trace: Transport sends the trace context with the
// token, Middleware reads it, and the guard's check is a span of it.
func ExampleWithTracerProvider() {
	// The resource's tracer provider; an in-memory recorder here, an OTLP
	// exporter in production.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	guard, _ := fencing.NewMemoryGuardWith(fencing.WithTracerProvider(tp))
	_ = guard.Admit(context.Background(), "ledger", 42) // the current holder wrote first
	resource := func(*http.Request) (string, error) { return "ledger", nil }
	srv := httptest.NewServer(fencing.Middleware(guard, resource)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()

	// The zombie, in a trace of its own (another process in real life).
	zombie := sdktrace.NewTracerProvider()
	defer zombie.Shutdown(context.Background())
	ctx, span := zombie.Tracer("worker").Start(context.Background(), "write ledger")
	client := &http.Client{Transport: &fencing.Transport{Token: func() fencing.Token { return 41 }}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	span.End()

	fmt.Println("answer:", resp.StatusCode)
	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), "in the zombie's trace:", s.SpanContext().TraceID() == span.SpanContext().TraceID())
		for _, kv := range s.Attributes() {
			fmt.Printf("  %s=%s\n", kv.Key, kv.Value.Emit())
		}
	}
	// Output:
	// answer: 409
	// fencing admit in the zombie's trace: true
	//   baton.fencing.guard=memory
	//   baton.fencing.resource=ledger
	//   baton.fencing.token=41
	//   baton.fencing.outcome=stale
	//   baton.fencing.high_water=42
}
