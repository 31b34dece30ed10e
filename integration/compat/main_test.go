package compat_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

func TestMain(m *testing.M) {
	start := time.Now()
	code := m.Run()
	printFigures(time.Since(start))
	cleanupBaton()
	if code == 0 {
		if err := goleak.Find(etcdtest.IgnoredGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// figures collects the measured results, printed per version at the end.
var figures struct {
	mu   sync.Mutex
	byV  map[string][]string
	took map[string]time.Duration
}

// figure records a measured result of the running version's scenario;
// `make test-compat` shows them.
func figure(t *testing.T, minor, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("%s: %s", scenario(t), fmt.Sprintf(format, args...))
	t.Logf("FIGURE etcd %s %s", minor, line)
	figures.mu.Lock()
	defer figures.mu.Unlock()
	if figures.byV == nil {
		figures.byV = make(map[string][]string)
	}
	figures.byV[minor] = append(figures.byV[minor], line)
}

// timed adds the time a version's test took to that version's total.
func timed(t *testing.T, minor string) {
	start := time.Now()
	t.Cleanup(func() {
		figures.mu.Lock()
		defer figures.mu.Unlock()
		if figures.took == nil {
			figures.took = make(map[string]time.Duration)
		}
		figures.took[minor] += time.Since(start)
	})
}

// scenario is the test's name without the version.
func scenario(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	out := parts[:0]
	for _, p := range parts {
		if p != "3.4" && p != "3.5" && p != "3.6" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "/")
}

func printFigures(total time.Duration) {
	figures.mu.Lock()
	defer figures.mu.Unlock()
	var vs []string
	for v := range figures.byV {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		fmt.Printf("SUMMARY etcd %s (%v)\n", v, figures.took[v].Round(time.Second))
		for _, line := range figures.byV[v] {
			fmt.Printf("SUMMARY   %s\n", line)
		}
	}
	fmt.Printf("SUMMARY compatibility suite took %v\n", total.Round(time.Second))
}

func ctxFor(t *testing.T, d time.Duration) context.Context { return etcdtest.Context(t, d) }

// endedAt records when a context ends, on the monotonic clock.
type endedAt struct {
	done chan struct{}
	at   time.Time
}

func whenEnded(ctx context.Context) *endedAt {
	e := &endedAt{done: make(chan struct{})}
	context.AfterFunc(ctx, func() {
		e.at = time.Now()
		close(e.done)
	})
	return e
}

// Time is when the context ended, zero while it has not.
func (e *endedAt) Time() time.Time {
	select {
	case <-e.done:
		return e.at
	default:
		return time.Time{}
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
