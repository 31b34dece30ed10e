package chaos_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// roleEnv selects the role of a child process: the test binary run again
// as a holder (see child_test.go).
const roleEnv = "BATON_CHAOS_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(childMain(role))
	}
	code := m.Run()
	if code == 0 {
		if err := cluster.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// figure logs a measured figure; `make test-chaos` shows them.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

// trials picks the number of trials: n, or short under -short.
func trials(n, short int) int {
	if testing.Short() {
		return short
	}
	return n
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// within fails the test if ch does not close within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

// endedAt records when ctx ends, on this process's monotonic clock.
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

// Time is when ctx ended; zero if it has not (yet).
func (e *endedAt) Time() time.Time {
	select {
	case <-e.done:
		return e.at
	default:
		return time.Time{}
	}
}

// durations summarises a sample: min, median, max.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("n=%d min=%v median=%v max=%v", len(s), s[0].Round(time.Millisecond),
		s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// tracker checks mutual exclusion across every in-process holder: when
// one acquires a name, every earlier holder of that name must already have
// seen its Context end.
type tracker struct {
	mu         sync.Mutex
	holds      map[string][]trackedHold
	violations []string
}

type trackedHold struct {
	who   string
	token int64
	done  <-chan struct{}
}

func newTracker() *tracker { return &tracker{holds: make(map[string][]trackedHold)} }

// acquired records that who holds name with token until done closes, and
// records a violation if another holder's Context is still live.
func (tr *tracker) acquired(name, who string, token int64, done <-chan struct{}) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	live := tr.holds[name][:0]
	for _, h := range tr.holds[name] {
		select {
		case <-h.done:
			continue
		default:
		}
		tr.violations = append(tr.violations, fmt.Sprintf("%s acquired %q with token %d while %s (token %d) still held it",
			who, name, token, h.who, h.token))
		live = append(live, h)
	}
	tr.holds[name] = append(live, trackedHold{who: who, token: token, done: done})
}

func (tr *tracker) check(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.violations) > 0 {
		t.Errorf("two holders at once:\n%s", strings.Join(tr.violations, "\n"))
	}
}
