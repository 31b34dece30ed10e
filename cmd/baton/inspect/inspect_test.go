package inspect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/hold"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
)

func TestInspectLocksAndElections(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "inspect"
	cli := clitest.Srv.Client(t)

	// A lock held through the library (no acquisition record) with one
	// waiter, and one held by baton lock (with a record).
	m1, err := mutex.New(cli, "jobs/a", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	l1, err := m1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := mutex.New(cli, "jobs/a", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := m2.Lock(wctx)
		waiting <- err
	}()

	hctx, hcancel := context.WithCancel(ctx)
	var holdOut, holdErr clitest.SyncBuffer
	holdDone := make(chan int, 1)
	go func() { holdDone <- clitest.RunTo(hctx, ns, &holdOut, &holdErr, "lock", "other", "-o", "json") }()
	var held hold.HeldView
	// Status events, the acquisition included, are on stderr.
	clitest.WaitFor(t, func() bool {
		first, _, _ := strings.Cut(holdErr.String(), "\n")
		return json.Unmarshal([]byte(first), &held) == nil && held.Event == "acquired"
	})

	var locks struct {
		Locks []inspect.LockJSON `json:"locks"`
	}
	clitest.WaitFor(t, func() bool {
		code, out, _ := clitest.Run(ctx, t, ns, "locks", "-o", "json")
		if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &locks) != nil {
			return false
		}
		return len(locks.Locks) == 2 && locks.Locks[0].Waiters == 1
	})
	a, other := locks.Locks[0], locks.Locks[1]
	if a.Name != "jobs/a" || a.Token != int64(l1.Token()) || a.Key != l1.Key() || a.HeldSince != nil || a.TTLLeft <= 0 {
		t.Errorf("jobs/a: %+v; want token %d key %s, unknown held_since", a, l1.Token(), l1.Key())
	}
	if other.Name != "other" || other.Token != held.Token || other.HeldSince == nil || *other.HeldFor < 0 {
		t.Errorf("other: %+v; want token %d and a held_since", other, held.Token)
	}
	code, out, _ := clitest.Run(ctx, t, ns, "locks", "jobs/")
	if code != cmdutil.ExitOK || !strings.Contains(out, "jobs/a") || strings.Contains(out, "other") || !strings.Contains(out, "unknown") {
		t.Errorf("locks jobs/: code %d\n%s", code, out)
	}

	hcancel()
	if code := <-holdDone; code != cmdutil.ExitOK {
		t.Errorf("lock ended by its context: exit %d, want 0; stderr %s", code, holdErr.String())
	}
	if !strings.Contains(holdErr.String(), "released") {
		t.Errorf("lock did not say it released: %s", holdErr.String())
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("waiter: %v", err)
	}

	// Elections: no leader, then a leader and a candidate.
	code, out, _ = clitest.Run(ctx, t, ns, "leader", "sched")
	if code != cmdutil.ExitOK || !strings.Contains(out, "no leader") {
		t.Errorf("leader with none: %d %q", code, out)
	}
	e1, _ := election.New(cli, "sched", election.WithNamespace(ns))
	defer e1.Close()
	e2, _ := election.New(cli, "sched", election.WithNamespace(ns))
	defer e2.Close()
	t1, err := e1.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	campaigned := make(chan error, 1)
	go func() {
		_, err := e2.Campaign(cctx, "host-b")
		campaigned <- err
	}()
	var lj inspect.LeaderJSON
	code, out, _ = clitest.Run(ctx, t, ns, "leader", "sched", "-o", "json")
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &lj) != nil || lj.Leader == nil {
		t.Fatalf("leader: %d %s", code, out)
	}
	if lj.Leader.Value != "host-a" || lj.Leader.Token != int64(t1.Token()) || lj.Leader.Key != t1.Key() || lj.Leader.LeadingSince != nil {
		t.Errorf("leader %+v, want host-a token %d", lj.Leader, t1.Token())
	}
	var cj struct {
		Candidates []inspect.CandidateJSON `json:"candidates"`
	}
	clitest.WaitFor(t, func() bool {
		code, out, _ := clitest.Run(ctx, t, ns, "candidates", "sched", "-o", "json")
		return code == cmdutil.ExitOK && json.Unmarshal([]byte(out), &cj) == nil && len(cj.Candidates) == 2
	})
	if !cj.Candidates[0].Leader || cj.Candidates[0].Value != "host-a" || cj.Candidates[1].Value != "host-b" ||
		cj.Candidates[1].Token <= cj.Candidates[0].Token {
		t.Errorf("candidates %+v", cj.Candidates)
	}
	ccancel()
	<-campaigned
	_ = t1.Resign(ctx)
}

func TestObserveStreamsChanges(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "observe"
	cli := clitest.Srv.Client(t)
	e, _ := election.New(cli, "obs", election.WithNamespace(ns))
	defer e.Close()

	pr, pw := io.Pipe()
	octx, ocancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		env := map[string]string{"BATON_ENDPOINTS": clitest.Srv.Endpoint()}
		io := cmdutil.IO{Out: pw, Err: io.Discard, Getenv: func(k string) string { return env[k] }}
		done <- clitest.Main(octx, []string{"--namespace", ns, "observe", "obs", "-o", "json"}, io)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	next := func() inspect.ObserveJSON {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("observe ended early: %v", lines.Err())
		}
		var ev inspect.ObserveJSON
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Leader {
		t.Fatalf("first event %+v, want no leader", ev)
	}
	term, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); !ev.Leader || ev.Value != "v1" || ev.Token != int64(term.Token()) {
		t.Errorf("event %+v, want leader v1 token %d", ev, term.Token())
	}
	if err := term.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Value != "v2" || ev.Token != int64(term.Token()) {
		t.Errorf("event %+v, want v2 with the same token", ev)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Leader {
		t.Errorf("event %+v, want no leader", ev)
	}
	ocancel()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if code := <-done; code != cmdutil.ExitOK {
		t.Errorf("observe exit %d, want 0", code)
	}
}

func TestUnlockFreeLock(t *testing.T) {
	code, _, errOut := clitest.Run(clitest.TestContext(t), t, "unlockfree", "unlock", "nothing", "--force", "--reason", "r")
	if code != cmdutil.ExitError || !strings.Contains(errOut, "not held") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestTryLockHeld(t *testing.T) {
	ctx := clitest.TestContext(t)
	m, _ := mutex.New(clitest.Srv.Client(t), "busy", mutex.WithNamespace("trylock"))
	defer m.Close()
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := clitest.Run(ctx, t, "trylock", "lock", "busy", "--try")
	if code != cmdutil.ExitNotAcquired || !strings.Contains(errOut, "held by another") {
		t.Errorf("--try: exit %d, stderr %q", code, errOut)
	}
	start := time.Now()
	code, _, errOut = clitest.Run(ctx, t, "trylock", "lock", "busy", "--timeout", "300ms")
	if code != cmdutil.ExitNotAcquired || !strings.Contains(errOut, "not acquired within") || time.Since(start) < 300*time.Millisecond {
		t.Errorf("--timeout: exit %d after %v, stderr %q", code, time.Since(start), errOut)
	}
}
