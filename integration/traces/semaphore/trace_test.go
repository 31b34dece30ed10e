package semaphore_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/semaphore"
)

func TestTracedPermitCarriesTheLimitAndItsPosition(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := newSem(t, client(t), "traced-permits", 3, semaphore.WithTracerProvider(tp))
	ctx := etcdtest.Context(t, 20*time.Second)
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*semaphore.Permit{p2, p1} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var positions []int64
	for _, sp := range rec.Ended() {
		a := map[string]any{}
		for _, kv := range sp.Attributes() {
			a[string(kv.Key)] = kv.Value.AsInterface()
		}
		if a["baton.lock.primitive"] != "semaphore" || a["baton.semaphore.limit"] != int64(3) {
			t.Errorf("%s: attributes %v", sp.Name(), a)
		}
		if sp.Name() == "semaphore wait" {
			positions = append(positions, a["baton.lock.queue_position"].(int64))
		}
	}
	if len(positions) != 2 || positions[0] != 0 || positions[1] != 1 {
		t.Fatalf("queue positions %v, want [0 1]: the second permit was asked for behind the first", positions)
	}
	if n := len(rec.Ended()); n != 6 {
		t.Fatalf("%d spans, want 2 waits, 2 holds, 2 releases", n)
	}
}
