//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/internal/netproxy"
	"github.com/batonhq/baton/mutex"
)

// trials is how many times the supervision tests repeat: BATON_E2E_TRIALS,
// default 10.
func trials(t *testing.T) int {
	if s := os.Getenv("BATON_E2E_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BATON_E2E_TRIALS=%q: want a positive number", s)
		}
		return n
	}
	return 10
}

// procChildren lists the children of pid, all threads included.
func procChildren(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// groupMembers lists every process (zombies included) of process group
// pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// commandGroup finds the process group of the command baton p runs (the
// child of its supervisor) once it has at least n processes.
func commandGroup(t *testing.T, p *proc, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, sup := range procChildren(p.cmd.Process.Pid) {
			for _, c := range procChildren(sup) {
				if len(groupMembers(c)) >= n {
					// Runs before baton's own cleanup: a failed test must
					// neither leave the group behind nor wait for it.
					t.Cleanup(func() { _ = syscall.Kill(-c, syscall.SIGKILL) })
					return c
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no command group of %d processes under baton %d\nstderr:\n%s", n, p.cmd.Process.Pid, p.errOut())
	return 0
}

// waitGroupGone returns when group pgid has no process left, and when.
func waitGroupGone(t *testing.T, pgid int, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if len(groupMembers(pgid)) == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has %v after %v", pgid, groupMembers(pgid), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKilledBatonTakesItsWholeCommandGroup(t *testing.T) {
	var worst time.Duration
	for i := 0; i < trials(t); i++ {
		// Every other trial kills baton's whole process group, as a shell's
		// kill -9 %1 does.
		wholeGroup := i%2 == 1
		p := startWith(t, srv.Endpoint(), &syscall.SysProcAttr{Setpgid: true},
			"lock", fmt.Sprintf("sigkill-%d", i), "--ttl", "5s", "--", "sh", "-c", "sleep 600 & sleep 600")
		pgid := commandGroup(t, p, 3) // sh and both sleeps
		killed := time.Now()
		target := p.cmd.Process.Pid
		if wholeGroup {
			target = -target
		}
		if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		gone := waitGroupGone(t, pgid, time.Second)
		worst = max(worst, gone.Sub(killed))
		p.wait(5 * time.Second)
	}
	t.Logf("%d trials: every process of the group gone at most %v after SIGKILL to baton (or to its process group)", trials(t), worst)
}

func TestFrozenBatonCannotOutliveItsLock(t *testing.T) {
	dir := t.TempDir()
	var margins []time.Duration
	for i := 0; i < trials(t); i++ {
		name := fmt.Sprintf("frozen-%d", i)
		prefix := "/baton/v1/lock/" + name + "/"
		a := start(t, "lock", name, "--ttl", "2s", "--", "sh", "-c", "sleep 600 & sleep 600")
		pgid := commandGroup(t, a, 3)
		// b's command checks, as it starts, that nothing of a's group is
		// left, and records when it started.
		stamp := filepath.Join(dir, name)
		b := start(t, "lock", name, "--ttl", "2s", "--", "sh", "-c",
			fmt.Sprintf(`if kill -0 -%d 2>/dev/null; then echo OVERLAP; fi; date +%%s.%%N > %s; echo b-started`, pgid, stamp))
		waitKeys(t, prefix, 2)

		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		gone := waitGroupGone(t, pgid, 5*time.Second)
		b.waitLine("b-started", 10*time.Second)
		raw, err := os.ReadFile(stamp)
		if err != nil {
			t.Fatal(err)
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
		if err != nil {
			t.Fatalf("stamp %q: %v", raw, err)
		}
		started := time.Unix(0, int64(secs*1e9))
		margin := started.Sub(gone)
		margins = append(margins, margin)
		if strings.Contains(b.out(), "OVERLAP") || margin <= 0 {
			t.Errorf("trial %d: b's command started %v after a's group was seen gone (OVERLAP printed: %v)",
				i, margin, strings.Contains(b.out(), "OVERLAP"))
		}
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		if code := a.wait(10 * time.Second); code != cli.ExitOwnershipLost {
			t.Errorf("trial %d: frozen baton exit %d after SIGCONT, want %d\nstderr:\n%s", i, code, cli.ExitOwnershipLost, a.errOut())
		}
		if code := b.wait(10 * time.Second); code != 0 {
			t.Errorf("trial %d: b exit %d\nstderr:\n%s", i, code, b.errOut())
		}
	}
	t.Logf("%d trials: the second command started this long after the frozen holder's group was gone: %v", trials(t), margins)
}

func TestCommandTrappingSIGTERMIsKilledAfterGrace(t *testing.T) {
	const grace = time.Second
	p := start(t, "lock", "trapper", "--ttl", "5s", "--grace", grace.String(), "--",
		"sh", "-c", `trap "" TERM; sleep 600 & echo trapping; wait`)
	p.waitLine("trapping", 10*time.Second)
	pgid := commandGroup(t, p, 2)
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gone := waitGroupGone(t, pgid, grace+2*time.Second).Sub(sent)
	if gone < grace {
		t.Errorf("group gone %v after SIGTERM, before the %v grace", gone, grace)
	}
	deadline := sent.Add(grace + time.Second)
	for keyCount(t, "/baton/v1/lock/trapper/") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lock still held %v after SIGTERM (grace %v)", time.Since(sent), grace)
		}
		time.Sleep(10 * time.Millisecond)
	}
	released := time.Since(sent)
	if code := p.wait(5 * time.Second); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d (the command was SIGKILLed)\nstderr:\n%s", code, 128+int(syscall.SIGKILL), p.errOut())
	}
	t.Logf("group SIGKILLed %v after SIGTERM, lock released %v after it (grace %v)", gone, released, grace)
}

func TestLockChecksTheCommandBeforeWaiting(t *testing.T) {
	m, err := mutex.New(client(t), "checked")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wch := client(t).Watch(ctxT(t), "/baton/v1/", clientv3.WithPrefix(), clientv3.WithRev(0))
	for _, c := range []struct {
		argv []string
		code int
	}{
		{[]string{"/nonexistent"}, 127},
		{[]string{"no-such-command-anywhere"}, 127},
		{[]string{plain}, 126},
	} {
		startedAt := time.Now()
		// The lock is held by another: a command checked only after
		// acquiring would wait here until the timeout.
		code, _, errOut := runBaton(t, 10*time.Second, append([]string{"lock", "checked", "--"}, c.argv...)...)
		if code != c.code || time.Since(startedAt) > 3*time.Second {
			t.Errorf("lock checked -- %v: exit %d after %v, want %d at once\nstderr:\n%s", c.argv, code, time.Since(startedAt), c.code, errOut)
		}
	}
	// No key was created (and deleted) under the namespace meanwhile.
	code, _, errOut := runBaton(t, 10*time.Second, "elect", "checked", "v", "--", "/nonexistent")
	if code != 127 {
		t.Errorf("elect -- /nonexistent: exit %d, want 127\nstderr:\n%s", code, errOut)
	}
	select {
	case wr := <-wch:
		t.Errorf("keys written: %v", wr.Events)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestInterruptedWaitExitsLikeAShell(t *testing.T) {
	m, err := mutex.New(client(t), "busy-wait")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		args []string
	}{
		{syscall.SIGINT, []string{"lock", "busy-wait", "--", "true"}},
		{syscall.SIGTERM, []string{"lock", "busy-wait", "--timeout", "60s"}},
		{syscall.SIGHUP, []string{"lock", "busy-wait"}},
	} {
		p := start(t, c.args...)
		p.waitLine(`waiting for lock "busy-wait": held by`, 10*time.Second)
		_ = p.cmd.Process.Signal(c.sig)
		if code := p.wait(5 * time.Second); code != 128+int(c.sig) {
			t.Errorf("%v during %v: exit %d, want %d\nstderr:\n%s", c.sig, c.args, code, 128+int(c.sig), p.errOut())
		}
	}
	e := start(t, "elect", "busy-elect", "a")
	e.waitLine(`leading election "busy-elect"`, 10*time.Second)
	p := start(t, "elect", "busy-elect", "b")
	p.waitLine(`waiting for election "busy-elect": led by "a"`, 10*time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(5 * time.Second); code != 130 {
		t.Errorf("SIGINT while campaigning: exit %d, want 130\nstderr:\n%s", code, p.errOut())
	}
	// SIGHUP to a holder releases like SIGTERM.
	_ = e.cmd.Process.Signal(syscall.SIGHUP)
	if code := e.wait(5 * time.Second); code != 0 || keyCount(t, "/baton/v1/election/busy-elect/") != 0 {
		t.Errorf("SIGHUP to the leader: exit %d, want 0 and its key gone\nstderr:\n%s", code, e.errOut())
	}
}

func TestTimeoutIsHonouredThroughAnOutage(t *testing.T) {
	m, err := mutex.New(client(t), "cut-off")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	px, err := netproxy.New(strings.TrimPrefix(srv.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const timeout = 4 * time.Second
	started := time.Now()
	p := startOn(t, px.Endpoint(), "lock", "cut-off", "--ttl", "2s", "--timeout", timeout.String())
	p.waitLine(`waiting for lock "cut-off"`, 10*time.Second)
	px.Blackhole()
	defer px.Restore()
	code := p.wait(timeout + 5*time.Second)
	took := time.Since(started)
	if code != cli.ExitNotAcquired || took < timeout || took > timeout+time.Second {
		t.Errorf("exit %d after %v, want %d after the %v timeout, within a second\nstderr:\n%s", code, took, cli.ExitNotAcquired, timeout, p.errOut())
	}
	if !strings.Contains(p.errOut(), "etcd unreachable, still waiting") {
		t.Errorf("no word of the outage:\n%s", p.errOut())
	}
}
