package mutex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
	// Each round times every mode once; the ratios are the medians of the
	// rounds' ratios, which a stalled fsync in one round cannot skew.
	var noop, sdk []float64
	n := 0
	for b.Loop() {
		var round [3]time.Duration
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
			round[i] = time.Since(began)
			spent[i] += round[i]
		}
		noop = append(noop, float64(round[1])/float64(round[0]))
		sdk = append(sdk, float64(round[2])/float64(round[0]))
		if n++; n%500 == 0 {
			rec.Reset()
		}
	}
	for i, m := range modes {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), m.name+"-ns/cycle")
	}
	b.ReportMetric(median(noop), "noop/untraced")
	b.ReportMetric(median(sdk), "sdk/untraced")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
