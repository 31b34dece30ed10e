package election

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ErrUnhealthy is wrapped by HealthCheck.Check when this process still
// acts as holder of a term (or lock) more than the timeout after its
// validity ended.
var ErrUnhealthy = errors.New("election: holding past the validity deadline")

// Validity is what a HealthCheck watches: a *Term, or a *mutex.Lock.
type Validity interface {
	Key() string
	Deadline() time.Time
	Context() context.Context
}

// HealthCheck tells a liveness probe whether this process is wedged: it
// fails while a tracked term is still being worked on (its Run function
// has not returned) more than a timeout after the term's validity ended,
// that is after the earlier of its validity deadline and the end of its
// Context. A healthy process stops its work when the Context ends; one
// that does not (work that ignores its context, a stuck loop, a watchdog
// starved of CPU) then fails the check, and Kubernetes restarts it. It is
// the counterpart of client-go's HealthzAdaptor.
//
// A process that does not lead, or leads within its validity, is healthy:
// the check says nothing about etcd's reachability, so an etcd outage does
// not restart every replica. Its methods are safe for concurrent use.
//
//	hc, _ := election.NewHealthCheck(10 * time.Second)
//	http.Handle("/healthz", hc)
//	err := e.Run(ctx, "host-a", hc.Wrap(work))
type HealthCheck struct {
	timeout time.Duration

	mu   sync.Mutex
	held map[*tracked]struct{}
}

type tracked struct {
	v     Validity
	ended time.Time // when v's Context ended; zero while it has not
	stop  func() bool
}

// NewHealthCheck returns a check that fails timeout after a tracked
// term's validity ended. timeout must be at least 0; it covers the time
// the work takes to return once its Context ends (for a supervisor, the
// grace it gives its command), so size it above that.
func NewHealthCheck(timeout time.Duration) (*HealthCheck, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("%w: election.NewHealthCheck: timeout %v: must be at least 0", ErrInvalid, timeout)
	}
	return &HealthCheck{timeout: timeout, held: map[*tracked]struct{}{}}, nil
}

// Track counts v as held by this process until done is called; call done
// once the work done under v has returned. done may be called more than
// once.
func (h *HealthCheck) Track(v Validity) (done func()) {
	tr := &tracked{v: v}
	h.mu.Lock()
	h.held[tr] = struct{}{}
	h.mu.Unlock()
	tr.stop = context.AfterFunc(v.Context(), func() {
		h.mu.Lock()
		tr.ended = time.Now()
		h.mu.Unlock()
	})
	return func() {
		tr.stop()
		h.mu.Lock()
		delete(h.held, tr)
		h.mu.Unlock()
	}
}

// Wrap returns fn, tracked from its call until it returns: the function
// to give Run.
func (h *HealthCheck) Wrap(fn func(ctx context.Context, t *Term) error) func(ctx context.Context, t *Term) error {
	return func(ctx context.Context, t *Term) error {
		defer h.Track(t)()
		return fn(ctx, t)
	}
}

// Held reports whether a tracked term's work is running.
func (h *HealthCheck) Held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held) > 0
}

// Check is CheckAt(time.Now()).
func (h *HealthCheck) Check() error { return h.CheckAt(time.Now()) }

// CheckAt returns an error wrapping ErrUnhealthy if, at now, a tracked
// term is held more than the timeout past the end of its validity; nil
// otherwise.
func (h *HealthCheck) CheckAt(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for tr := range h.held {
		end := tr.v.Deadline()
		if !tr.ended.IsZero() && (end.IsZero() || tr.ended.Before(end)) {
			end = tr.ended
		}
		if end.IsZero() {
			continue
		}
		if over := now.Sub(end); over > h.timeout {
			return fmt.Errorf("%w: %q still held %v after its validity ended (timeout %v)",
				ErrUnhealthy, tr.v.Key(), over.Round(time.Millisecond), h.timeout)
		}
	}
	return nil
}

// ServeHTTP answers 200 "ok" when Check passes and 503 with the reason
// when it fails.
func (h *HealthCheck) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.Check(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}
