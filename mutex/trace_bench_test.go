package mutex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/mutex"
)

// BenchmarkLockUnlockTracing measures a lock+unlock cycle with no span at
// all (the code before tracing), with the default global provider (a
// no-op unless the application installs one), and with an SDK recording
// every span, alternating the three in one run on one etcd so that the
// machine's noise hits each alike. It reports each one's time per cycle
// and the ratios to the untraced one.
func BenchmarkLockUnlockTracing(b *testing.B) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cli := srv.Client(b)
	modes := []struct {
		name string
		opt  mutex.Option
	}{
		{"untraced", config.Untraced()},
		{"noop", nil},
		{"sdk", mutex.WithTracerProvider(tp)},
	}
	ms := make([]*mutex.Mutex, len(modes))
	for i, m := range modes {
		var opts []mutex.Option
		if m.opt != nil {
			opts = append(opts, m.opt)
		}
		var err error
		ms[i], err = mutex.New(cli, fmt.Sprintf("bench-trace-%s-%x", m.name, rand.Uint32()), opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer ms[i].Close()
	}
	ctx := context.Background()
	spent := make([]time.Duration, len(ms))
	n := 0
	for b.Loop() {
		for j := range ms {
			i := (j + n) % len(ms) // each mode takes each turn in the rotation alike
			began := time.Now()
			l, err := ms[i].Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(began)
		}
		if n++; n%500 == 0 {
			rec.Reset()
		}
	}
	for i, m := range modes {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), m.name+"-ns/cycle")
	}
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "noop/untraced")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "sdk/untraced")
}
