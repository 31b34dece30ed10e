package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/rwmutex"
)

// gated is a command that prints "in <token>" and runs until its gate
// file appears.
func gated(dir, gate string) []string {
	return []string{"sh", "-c", `echo "in $BATON_FENCING_TOKEN $BATON_LOCK_KIND $BATON_SEMAPHORE_LIMIT"; ` +
		`while [ ! -e ` + filepath.Join(dir, gate) + ` ]; do sleep 0.02; done`}
}

func openGate(t *testing.T, dir, gate string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, gate), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tokenOf reads the token from an "in <token> ..." line.
func tokenOf(t *testing.T, line string) int64 {
	t.Helper()
	f := strings.Fields(line[strings.Index(line, "in "):])
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("no token in %q", line)
	}
	return n
}

func TestLockLimitTwoRunsTwoCommandsAndQueuesTheThird(t *testing.T) {
	const ns = "kinds-limit"
	dir := t.TempDir()
	lockArgs := func(gate string) []string {
		return append([]string{"--namespace", ns, "lock", "exports", "--limit", "2", "--"}, gated(dir, gate)...)
	}
	p1 := start(t, lockArgs("g1")...)
	p2 := start(t, lockArgs("g2")...)
	l1 := p1.waitLine("in ", 15*time.Second)
	l2 := p2.waitLine("in ", 15*time.Second)
	if !strings.HasSuffix(l1, "semaphore 2") {
		t.Errorf("command saw %q, want the kind and limit in its environment", l1)
	}

	p3 := start(t, lockArgs("g3")...)
	p3.waitLine("waiting for semaphore", 15*time.Second)
	if strings.Contains(p3.out(), "in ") {
		t.Fatalf("a third command ran beside two permits of limit 2:\n%s", p3.out())
	}
	waitKeys(t, "/"+ns+"/v1/semaphore/exports/", 3)

	// A different limit for the same semaphore is refused before queueing.
	code, _, errOut := runBaton(t, 15*time.Second, "--namespace", ns, "lock", "exports", "--limit", "3", "--try", "--", "true")
	if code != cli.ExitUsage || !strings.Contains(errOut, "limit") {
		t.Errorf("--limit 3 on a limit-2 semaphore: exit %d, want %d; stderr:\n%s", code, cli.ExitUsage, errOut)
	}
	// --try finds no permit free.
	code, _, errOut = runBaton(t, 15*time.Second, "--namespace", ns, "lock", "exports", "--limit", "2", "--try", "--", "true")
	if code != cli.ExitNotAcquired {
		t.Errorf("--try with both permits held: exit %d, want %d; stderr:\n%s", code, cli.ExitNotAcquired, errOut)
	}

	openGate(t, dir, "g1")
	if code := p1.wait(10 * time.Second); code != 0 {
		t.Fatalf("first command: exit %d\n%s", code, p1.errOut())
	}
	l3 := p3.waitLine("in ", 15*time.Second)
	if t3 := tokenOf(t, l3); t3 <= tokenOf(t, l1) || t3 <= tokenOf(t, l2) {
		t.Errorf("third permit's token %d is not above the earlier %q and %q", t3, l1, l2)
	}
	openGate(t, dir, "g2")
	openGate(t, dir, "g3")
	for _, p := range []*proc{p2, p3} {
		if code := p.wait(10 * time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, p.errOut())
		}
	}
	if n := keyCount(t, "/"+ns+"/v1/semaphore/exports/"); n != 0 {
		t.Errorf("%d permit keys left after every command exited", n)
	}
}

func TestLockSharedReadersRunTogetherAndWaitForAnEarlierWriter(t *testing.T) {
	const ns = "kinds-shared"
	dir := t.TempDir()
	readArgs := func(gate string) []string {
		return append([]string{"--namespace", ns, "lock", "catalog", "--shared", "--"}, gated(dir, gate)...)
	}
	r1 := start(t, readArgs("r1")...)
	r2 := start(t, readArgs("r2")...)
	if l := r1.waitLine("in ", 15*time.Second); !strings.Contains(l, "rwlock-read") {
		t.Errorf("reader saw %q, want BATON_LOCK_KIND=rwlock-read", l)
	}
	r2.waitLine("in ", 15*time.Second)

	// A plain lock of the same name is another object: it does not wait.
	code, _, errOut := runBaton(t, 15*time.Second, "--namespace", ns, "lock", "catalog", "--try", "--", "true")
	if code != cli.ExitOK {
		t.Errorf("plain lock beside shared holders of the same name: exit %d, want 0; stderr:\n%s", code, errOut)
	}

	rw, err := rwmutex.New(client(t), "catalog", rwmutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.TryLock(ctxT(t)); !errors.Is(err, rwmutex.ErrLocked) {
		t.Fatalf("TryLock beside two readers: %v, want ErrLocked", err)
	}
	type res struct {
		l   *rwmutex.Lock
		err error
	}
	wrote := make(chan res, 1)
	go func() {
		l, err := rw.Lock(ctxT(t))
		wrote <- res{l, err}
	}()
	waitKeys(t, "/"+ns+"/v1/rwlock/catalog/", 3) // the writer queued

	r3 := start(t, readArgs("r3")...)
	r3.waitLine("waiting for rwlock", 15*time.Second)
	openGate(t, dir, "r1")
	openGate(t, dir, "r2")
	var w res
	select {
	case w = <-wrote:
	case <-time.After(15 * time.Second):
		t.Fatal("the writer did not acquire after both readers left")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	if strings.Contains(r3.out(), "in ") {
		t.Fatalf("a reader that came after a waiting writer ran beside it:\n%s", r3.out())
	}
	if err := w.l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tok := tokenOf(t, r3.waitLine("in ", 15*time.Second)); tok <= int64(w.l.Token()) {
		t.Errorf("late reader's token %d not above the writer's %d", tok, w.l.Token())
	}
	openGate(t, dir, "r3")
	for _, p := range []*proc{r1, r2, r3} {
		if code := p.wait(10 * time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, p.errOut())
		}
	}
}

func TestForceUnlockFreesExactlyOnePermitAndLocksShowsKinds(t *testing.T) {
	const ns = "kinds-force"
	dir := t.TempDir()
	lockArgs := func(gate string) []string {
		return append([]string{"--namespace", ns, "lock", "exports", "--limit", "2", "--ttl", "6s", "--"}, gated(dir, gate)...)
	}
	p1 := start(t, lockArgs("g1")...)
	p1.waitLine("in ", 15*time.Second)
	p2 := start(t, lockArgs("g2")...)
	p2.waitLine("in ", 15*time.Second)
	p3 := start(t, lockArgs("g3")...)
	p3.waitLine("waiting for semaphore", 15*time.Second)
	reader := start(t, append([]string{"--namespace", ns, "lock", "catalog", "--shared", "--"}, gated(dir, "r")...)...)
	reader.waitLine("in ", 15*time.Second)
	mu := start(t, "--namespace", ns, "lock", "nightly")
	mu.waitLine("holding lock", 15*time.Second)

	code, out, errOut := runBaton(t, 15*time.Second, "--namespace", ns, "-o", "json", "locks")
	var v struct {
		Count int `json:"count"`
		Locks []struct {
			Name    string `json:"name"`
			Kind    string `json:"kind"`
			Holders int    `json:"holders"`
			Limit   int    `json:"limit"`
			Key     string `json:"key"`
			Waiters int    `json:"waiters"`
			HeldFor *float64
		} `json:"locks"`
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("locks: exit %d\n%s\n%s", code, out, errOut)
	}
	got := make([]string, 0, len(v.Locks))
	for _, l := range v.Locks {
		got = append(got, l.Name+"|"+l.Kind+"|"+strconv.Itoa(l.Holders)+"/"+strconv.Itoa(l.Limit)+"|"+strconv.Itoa(l.Waiters))
	}
	want := "catalog|rwlock read|1/0|0 exports|semaphore|2/2|1 exports|semaphore|2/2|1 nightly|mutex|1/0|0"
	if strings.Join(got, " ") != want {
		t.Fatalf("locks shows %q, want %q", strings.Join(got, " "), want)
	}
	victim, other := v.Locks[1].Key, v.Locks[2].Key
	code, out, _ = runBaton(t, 15*time.Second, "--namespace", ns, "locks", "exports")
	if code != cli.ExitOK || !strings.Contains(out, "semaphore  2/2") || !strings.Contains(out, "1 lock(s), 2 holder(s)") {
		t.Errorf("locks table:\n%s", out)
	}

	// Without --holder-key, unlock names the holders to choose from.
	code, _, errOut = runBaton(t, 15*time.Second, "--namespace", ns, "unlock", "exports", "--force", "--reason", "e2e")
	if code != cli.ExitUsage || !strings.Contains(errOut, victim) || !strings.Contains(errOut, other) {
		t.Errorf("unlock without --holder-key: exit %d, want %d listing both keys; stderr:\n%s", code, cli.ExitUsage, errOut)
	}

	code, out, errOut = runBaton(t, 30*time.Second, "--namespace", ns, "unlock", "exports", "--holder-key", victim,
		"--force", "--reason", "e2e: one permit", "--even-if-alive", "--watch", "500ms")
	if code != cli.ExitOK || !strings.Contains(out, "deleted key") {
		t.Fatalf("unlock --holder-key: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// The holder of that permit stops; the waiter takes it; the other holder holds on.
	if code := p1.wait(15 * time.Second); code != cli.ExitOwnershipLost {
		t.Errorf("forced holder: exit %d, want %d\n%s", code, cli.ExitOwnershipLost, p1.errOut())
	}
	p3.waitLine("in ", 15*time.Second)
	resp, err := client(t).Get(ctxT(t), other)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the other permit's key %s: %v, %d kvs", other, err, len(resp.Kvs))
	}
	select {
	case <-p2.done:
		t.Fatalf("the other holder exited: %d\n%s", p2.code, p2.errOut())
	default:
	}

	code, out, _ = runBaton(t, 10*time.Second, "--namespace", ns, "audit", "-o", "json")
	var audit struct {
		Records []map[string]any `json:"records"`
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &audit) != nil || len(audit.Records) != 1 {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if r := audit.Records[0]; r["kind"] != "semaphore" || r["key"] != victim || r["result"] != "deleted" {
		t.Errorf("audit record %v", r)
	}

	// A reader is forced the same way.
	code, out, errOut = runBaton(t, 30*time.Second, "--namespace", ns, "unlock", "catalog", "--holder-key", v.Locks[0].Key,
		"--force", "--reason", "e2e: one reader", "--even-if-alive", "--watch", "500ms")
	if code != cli.ExitOK || !strings.Contains(out, "a read lock of rwlock") {
		t.Fatalf("unlock a reader: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code := reader.wait(15 * time.Second); code != cli.ExitOwnershipLost {
		t.Errorf("forced reader: exit %d, want %d", code, cli.ExitOwnershipLost)
	}

	// A key of another name is refused before connecting.
	code, _, _ = runBaton(t, 10*time.Second, "--namespace", ns, "unlock", "nightly", "--holder-key", other, "--force", "--reason", "x")
	if code != cli.ExitUsage {
		t.Errorf("--holder-key of another name: exit %d, want %d", code, cli.ExitUsage)
	}
	openGate(t, dir, "g2")
	openGate(t, dir, "g3")
	_ = mu.cmd.Process.Signal(os.Interrupt)
	for _, p := range []*proc{p2, p3, mu} {
		p.wait(10 * time.Second)
	}
}
