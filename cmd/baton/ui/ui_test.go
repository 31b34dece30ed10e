package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
)

func TestUIListenBeyondLoopbackNeedsTLSOrAFlag(t *testing.T) {
	for _, tc := range []struct {
		o    ui.Options
		fail string
	}{
		{ui.Options{Listen: "127.0.0.1:8080"}, ""},
		{ui.Options{Listen: "[::1]:8080"}, ""},
		{ui.Options{Listen: "localhost:0"}, ""},
		{ui.Options{Listen: ":8080"}, "beyond loopback"},
		{ui.Options{Listen: "0.0.0.0:8080"}, "beyond loopback"},
		{ui.Options{Listen: "10.1.2.3:8080"}, "beyond loopback"},
		{ui.Options{Listen: ":8080", Insecure: true}, ""},
		{ui.Options{Listen: ":8443", TLSCert: "c.pem", TLSKey: "k.pem"}, ""},
		{ui.Options{Listen: ":8443", TLSCert: "c.pem"}, "go together"},
		{ui.Options{Listen: "nonsense"}, "host:port"},
	} {
		err := tc.o.Validate()
		if tc.fail == "" && err != nil || tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail) || cmdutil.ExitCode(err) != cmdutil.ExitUsage) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.fail)
		}
	}
	code, _, stderr := clitest.Run(clitest.TestContext(t), t, "ui-listen", "ui", "--listen", "0.0.0.0:0")
	if code != cmdutil.ExitUsage || !strings.Contains(stderr, "--insecure-listen") {
		t.Fatalf("ui --listen 0.0.0.0:0: %d %q", code, stderr)
	}
}

func TestUIRefusesForeignHostAndSetsAStrictPolicy(t *testing.T) {
	h := ui.Handler(ui.NewState(nil, "ui-host", time.Now), true)
	for host, want := range map[string]int{
		"127.0.0.1:8080": http.StatusOK, "localhost:8080": http.StatusOK, "[::1]:8080": http.StatusOK,
		"evil.example:8080": http.StatusMisdirectedRequest, "192.168.1.2": http.StatusMisdirectedRequest,
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d, want %d", host, rec.Code, want)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("Host %s: CSP %q", host, csp)
		}
	}
	for _, path := range []string{"/ui.js", "/ui.css"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %v", path, rec.Code, rec.Header())
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Host = "127.0.0.1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", rec.Code)
	}
}

// startUIState follows namespace ns until the test ends.
func startUIState(t *testing.T, ns string) *ui.State {
	t.Helper()
	st := ui.NewState(clitest.Srv.Client(t), ns, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); st.Run(ctx) }()
	done := st.View()
	t.Cleanup(func() { done(); cancel(); wg.Wait() })
	return st
}

// waitSnapshot waits, on change notifications, up to 10 s for ok.
func waitSnapshot(t *testing.T, st *ui.State, what string, ok func(ui.Snapshot) bool) ui.Snapshot {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		changed := st.Changed()
		s := st.Snapshot()
		if ok(s) {
			return s
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: not seen in 10 s; last snapshot %+v", what, s)
		}
	}
}

func spanOf(s ui.Snapshot, kind, name string, token int64) *ui.Span {
	for _, sp := range s.Spans {
		if sp.Kind == kind && sp.Name == name && sp.Token == token {
			return sp
		}
	}
	return nil
}

func TestUIStateFollowsLeadersLocksAndTheirEnds(t *testing.T) {
	// Its own namespace per run: the audit trail it counts stays in etcd.
	ns := fmt.Sprintf("ui-state-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	waitSnapshot(t, st, "connected", func(s ui.Snapshot) bool { return s.Connected })
	cli := clitest.Srv.Client(t)
	ctx := clitest.TestContext(t)

	e, err := election.New(cli, "sched", election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a, err := e.Campaign(ctx, "a <script>x</script>")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := election.New(cli, "sched", election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	bTerm := make(chan *election.Term, 1)
	go func() {
		t, err := e2.Campaign(ctx, "b")
		if err == nil {
			bTerm <- t
		}
	}()
	waitSnapshot(t, st, "leader with a queued candidate and TTLs", func(s ui.Snapshot) bool {
		return len(s.Objects) == 1 && len(s.Objects[0].Queue) == 2 && s.Objects[0].Queue[0].Value == "a <script>x</script>" &&
			s.Objects[0].Queue[0].TTLLeftMs > 0 && s.Objects[0].Queue[0].TTLSeconds == int64(election.DefaultTTL/time.Second)
	})
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-bTerm
	s := waitSnapshot(t, st, "handover", func(s ui.Snapshot) bool {
		sp := spanOf(s, "election", "sched", int64(a.Token()))
		return sp != nil && sp.End != nil && spanOf(s, "election", "sched", int64(b.Token())) != nil
	})
	if sp := spanOf(s, "election", "sched", int64(a.Token())); sp.Cause != "released" {
		t.Fatalf("resigned leader's span ended with %q, want released", sp.Cause)
	}

	// A lock held, then its lease revoked: the end says so.
	m, err := mutex.New(cli, "job", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyspace.RecordHeld(ctx, l.Txn, keyspace.HeldPut(ns, "lock", "job", l.Lease(), l.Acquired()))
	waitSnapshot(t, st, "lock holder with its acquisition time", func(s ui.Snapshot) bool {
		sp := spanOf(s, "lock", "job", int64(l.Token()))
		return sp != nil && sp.StartKnown
	})
	if _, err := cli.Revoke(ctx, l.Lease()); err != nil {
		t.Fatal(err)
	}
	s = waitSnapshot(t, st, "lock's end", func(s ui.Snapshot) bool {
		sp := spanOf(s, "lock", "job", int64(l.Token()))
		return sp != nil && sp.End != nil
	})
	if sp := spanOf(s, "lock", "job", int64(l.Token())); !strings.HasPrefix(sp.Cause, "lease ended") {
		t.Fatalf("revoked lock's span ended with %q", sp.Cause)
	}

	// A force-unlock: the audit record names who and why.
	code, _, stderr := clitest.Run(ctx, t, ns, "resign", "sched", "--force", "--even-if-alive", "--reason", "stuck <b>")
	if code != cmdutil.ExitOK {
		t.Fatalf("resign --force: %d %s", code, stderr)
	}
	s = waitSnapshot(t, st, "forced end and audit record", func(s ui.Snapshot) bool {
		sp := spanOf(s, "election", "sched", int64(b.Token()))
		return sp != nil && sp.End != nil && len(s.Audit) == 1 && strings.Contains(sp.Cause, "stuck <b>")
	})
	if a := s.Audit[0]; a.AuditRecord == nil || a.Reason != "stuck <b>" || a.Name != "sched" {
		t.Fatalf("audit entry %+v", a)
	}
}

func TestUIEventsStreamSnapshotsOnChange(t *testing.T) {
	const ns = "ui-events"
	st := startUIState(t, ns)
	srvHTTP := httptest.NewServer(ui.Handler(st, false))
	defer srvHTTP.Close()
	ctx, cancel := context.WithCancel(clitest.TestContext(t))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srvHTTP.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := make(chan string, 64)
	go func() {
		defer close(events)
		buf := make([]byte, 64<<10)
		var acc strings.Builder
		for {
			n, err := resp.Body.Read(buf)
			acc.WriteString(string(buf[:n]))
			for {
				s := acc.String()
				i := strings.Index(s, "\n\n")
				if i < 0 {
					break
				}
				events <- s[:i]
				acc.Reset()
				acc.WriteString(s[i+2:])
			}
			if err != nil {
				return
			}
		}
	}()
	if first := <-events; first != "retry: 1000" {
		t.Fatalf("first event %q", first)
	}
	if _, err := clitest.Srv.Client(t).Put(ctx, "/"+ns+"/v1/lock/j/1", "holder-1"); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			if strings.HasPrefix(ev, "event: state\ndata: {") && strings.Contains(ev, `"value":"holder-1"`) {
				return
			}
		case <-timeout:
			t.Fatal("no snapshot with the new lock within 10 s")
		}
	}
}

// The page shows an election's strategy and each candidate's priority and
// version; a preferred candidate that waits without a key is listed too.
func TestUIStateShowsCandidateAttributes(t *testing.T) {
	ns := fmt.Sprintf("ui-cands-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	waitSnapshot(t, st, "connected", func(s ui.Snapshot) bool { return s.Connected })
	cli := clitest.Srv.Client(t)
	ctx := clitest.TestContext(t)
	opts := []election.Option{election.WithNamespace(ns), election.WithStrategy(election.Preferred)}
	a, _ := election.New(cli, "sched", append(opts, election.WithPriority(5), election.WithVersion("v1.4.2"))...)
	defer a.Close()
	b, _ := election.New(cli, "sched", append(opts, election.WithVersion("v1.5.0"))...)
	defer b.Close()
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	go func() { _, _ = b.Campaign(bctx, "host-b") }()
	s := waitSnapshot(t, st, "both candidates", func(s ui.Snapshot) bool {
		return len(s.Objects) == 1 && len(s.Objects[0].Queue) == 2
	})
	o := s.Objects[0]
	l, w := o.Queue[0], o.Queue[1]
	if o.Strategy != "preferred" || o.Holders != 1 || o.Waiters != 1 ||
		!l.Holding || l.Value != "host-a" || l.Priority != 5 || l.Version != "v1.4.2" || l.Token != int64(ta.Token()) ||
		w.Holding || w.Value != "host-b" || w.Priority != 0 || w.Version != "v1.5.0" || w.Token != 0 {
		t.Fatalf("election %+v", o)
	}
	_ = ta.Resign(ctx) // hands over to host-b
	waitSnapshot(t, st, "host-b leading", func(s ui.Snapshot) bool {
		return len(s.Objects) == 1 && len(s.Objects[0].Queue) == 1 && s.Objects[0].Queue[0].Holding && s.Objects[0].Queue[0].Value == "host-b"
	})
}
