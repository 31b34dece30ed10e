package election_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

func newHealthCheck(t *testing.T, timeout time.Duration) *election.HealthCheck {
	t.Helper()
	hc, err := election.NewHealthCheck(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func TestHealthCheckRejectsNegativeTimeout(t *testing.T) {
	_, err := election.NewHealthCheck(-time.Second)
	if !errors.Is(err, election.ErrInvalid) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("NewHealthCheck(-1s) = %v, want ErrInvalid naming the timeout", err)
	}
}

func TestHealthCheckFailsOnlyPastDeadlinePlusTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	e := newElection(t, client(t), "health-deadline", election.WithTTL(10*time.Second))
	hc := newHealthCheck(t, timeout)
	term, err := e.Campaign(etcdtest.Context(t, 10*time.Second), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer resignNow(term)
	if err := hc.CheckAt(time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("untracked term: %v, want healthy", err)
	}
	done := hc.Track(term)
	if !hc.Held() {
		t.Fatal("Held = false while tracked")
	}
	if err := hc.Check(); err != nil {
		t.Fatalf("leading within validity: %v", err)
	}
	// A renewal may move the deadline between the reads: retry then.
	for i := 0; ; i++ {
		d := term.Deadline()
		at, past := hc.CheckAt(d.Add(timeout)), hc.CheckAt(d.Add(timeout+time.Millisecond))
		if !term.Deadline().Equal(d) && i < 5 {
			continue
		}
		if at != nil {
			t.Fatalf("at deadline + timeout: %v, want healthy", at)
		}
		if !errors.Is(past, election.ErrUnhealthy) || !strings.Contains(past.Error(), term.Key()) {
			t.Fatalf("past deadline + timeout: %v, want ErrUnhealthy naming the key", past)
		}
		break
	}
	done()
	done()
	if hc.Held() || hc.CheckAt(time.Now().Add(time.Hour)) != nil {
		t.Fatal("a term no longer tracked still counts")
	}
}

// Work that ignores its context keeps the term "held" after Resign ends
// it: the check fails timeout after the Context ended, although the lease
// (and so the deadline) lives on.
func TestHealthCheckFailsWhenWorkOutlivesItsTerm(t *testing.T) {
	const timeout = 2 * time.Second
	e := newElection(t, client(t), "health-wedged", election.WithTTL(10*time.Second))
	hc := newHealthCheck(t, timeout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan *election.Term, 1)
	release := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, "a", hc.Wrap(func(_ context.Context, term *election.Term) error {
			terms <- term
			<-release // wedged: ignores its context
			return nil
		}))
	}()
	term := <-terms
	before := time.Now()
	if err := term.Resign(etcdtest.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, term.Done(), 5*time.Second, "term ending on Resign")
	after := time.Now()
	if term.Deadline().Before(after.Add(time.Second)) {
		t.Fatalf("deadline %v already near: the test needs it far", term.Deadline())
	}
	if err := hc.CheckAt(before.Add(timeout)); err != nil {
		t.Fatalf("within timeout of the end: %v", err)
	}
	if err := hc.CheckAt(after.Add(timeout + time.Millisecond)); !errors.Is(err, election.ErrUnhealthy) {
		t.Fatalf("past timeout after the end: %v, want ErrUnhealthy", err)
	}
	cancel()
	close(release)
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if hc.Held() || hc.CheckAt(after.Add(time.Hour)) != nil {
		t.Fatal("the check still counts a term whose work returned")
	}
}

func TestHealthCheckServesStatus(t *testing.T) {
	e := newElection(t, client(t), "health-http", election.WithTTL(10*time.Second))
	hc := newHealthCheck(t, 0)
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		hc.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("not leading: %d %q", code, body)
	}
	term, err := e.Campaign(etcdtest.Context(t, 10*time.Second), "a")
	if err != nil {
		t.Fatal(err)
	}
	done := hc.Track(term)
	defer done()
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("leading: %d", code)
	}
	resignNow(term)
	<-term.Done()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "validity ended") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %q 5 s after the term ended with a 0 timeout", code, body)
		}
		time.Sleep(time.Millisecond)
	}
}

func resignNow(t *election.Term) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.Resign(ctx)
}
