package debughttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/debughttp"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
)

func get(t *testing.T, h http.Handler) debughttp.Snapshot {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/baton", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var s debughttp.Snapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	return s
}

func TestHandlerServesHeldLocksAndTerms(t *testing.T) {
	cli := srv.Client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ns = "debug-held"
	report, err := mutex.New(cli, "reports/nightly", mutex.WithNamespace(ns), mutex.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = report.Close() })
	sched, err := election.New(cli, "scheduler", election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sched.Close() })
	h := debughttp.Handler(debughttp.From(report.Held), debughttp.From(sched.Held))

	if s := get(t, h); len(s.Held) != 0 {
		t.Fatalf("before any acquisition: %+v, want nothing held", s.Held)
	}
	lock, err := report.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	term, err := sched.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	s := get(t, h)
	if len(s.Held) != 2 {
		t.Fatalf("held %+v, want the lock and the term", s.Held)
	}
	l, e := s.Held[0], s.Held[1]
	if l.Kind != "lock" || l.Namespace != ns || l.Name != "reports/nightly" || l.Key != lock.Key() ||
		l.Token != lock.Token() || l.Lease != strconv.FormatInt(int64(lock.Lease()), 16) || l.Value != "" {
		t.Fatalf("lock entry %+v does not describe lock %s token %d", l, lock.Key(), lock.Token())
	}
	if l.TTLSeconds != 10 || l.TTLLeftSeconds <= 0 || l.TTLLeftSeconds > 10 || l.HeldSeconds < 0 || !l.Valid || l.Ended != "" {
		t.Fatalf("lock entry %+v: want TTL 10 s, TTL left in (0, 10], valid", l)
	}
	if !l.Acquired.Equal(lock.Acquired()) || l.Deadline.Before(l.Acquired) {
		t.Fatalf("lock entry times %v / %v, want acquired %v", l.Acquired, l.Deadline, lock.Acquired())
	}
	if e.Kind != "election" || e.Name != "scheduler" || e.Value != "host-a" || e.Token != term.Token() || !e.Valid {
		t.Fatalf("term entry %+v does not describe term %s token %d", e, term.Key(), term.Token())
	}
	if err := term.Proclaim(ctx, "host-a:v2"); err != nil {
		t.Fatal(err)
	}
	if s := get(t, h); s.Held[1].Value != "host-a:v2" {
		t.Fatalf("after Proclaim the value is %q", s.Held[1].Value)
	}

	// An operator deletes the lock's key: the lock shows as ended until
	// its holder unlocks it.
	if _, err := cli.Delete(ctx, lock.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Done():
	case <-ctx.Done():
		t.Fatal("the lock did not notice its key's deletion")
	}
	s = get(t, h)
	if len(s.Held) != 2 || s.Held[0].Valid || s.Held[0].Ended == "" {
		t.Fatalf("after losing the lock: %+v, want it listed as ended with a cause", s.Held)
	}
	_ = lock.Unlock(ctx)
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if s := get(t, h); len(s.Held) != 0 {
		t.Fatalf("after Unlock and Resign: %+v, want nothing held", s.Held)
	}
}

func TestHandlerRefusesWrites(t *testing.T) {
	h := debughttp.Handler()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(m, "/", nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Fatalf("%s: status %d, Allow %q; want 405 and GET, HEAD", m, rec.Code, rec.Header().Get("Allow"))
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatalf("HEAD: status %d, %d body bytes; want 200 and none", rec.Code, rec.Body.Len())
	}
}
