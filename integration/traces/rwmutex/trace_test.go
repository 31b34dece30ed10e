package rwmutex_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rwmutex"
)

func TestTracedReadAndWriteLocksSayTheirMode(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rw := newRW(t, client(t), "traced-rw", rwmutex.WithTracerProvider(tp))
	ctx := etcdtest.Context(t, 20*time.Second)
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	modes := map[string][]string{}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "baton.lock.mode" {
				modes[s.Name()] = append(modes[s.Name()], kv.Value.AsString())
			}
		}
	}
	for _, name := range []string{"rwmutex wait", "rwmutex hold", "rwmutex release"} {
		if got := modes[name]; len(got) != 2 || got[0] != "read" || got[1] != "write" {
			t.Errorf("%s modes %v, want [read write]", name, got)
		}
	}
}
