//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cli"
)

// supervisorOf finds the supervisor of baton p: its child that is the
// parent of the command's group leader pgid.
func supervisorOf(t *testing.T, p *proc, pgid int) int {
	t.Helper()
	for _, sup := range procChildren(p.cmd.Process.Pid) {
		if slices.Contains(procChildren(sup), pgid) {
			return sup
		}
	}
	t.Fatalf("no supervisor of group %d under baton %d", pgid, p.cmd.Process.Pid)
	return 0
}

// A supervisor killed by pid (by its own command, a careless kill, the
// OOM killer) does not leave the command running: baton kills its group
// before it releases the lock, and the next holder's command never runs
// beside it.
func TestKilledSupervisorTakesItsCommandGroupBeforeTheRelease(t *testing.T) {
	const name = "supervisor-killed"
	a := start(t, "lock", name, "--ttl", "5s", "--", "sh", "-c", "sleep 600 & sleep 600")
	pgid := commandGroup(t, a, 3)
	sup := supervisorOf(t, a, pgid)
	b := start(t, "lock", name, "--", "sh", "-c",
		fmt.Sprintf(`if kill -0 -%d 2>/dev/null; then echo OVERLAP; fi; echo b-started`, pgid))
	waitKeys(t, "/baton/v1/lock/"+name+"/", 2)

	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(10 * time.Second); code != cli.ExitError {
		t.Errorf("baton exit %d after its supervisor was killed, want %d\nstderr:\n%s", code, cli.ExitError, a.errOut())
	}
	waitGroupGone(t, pgid, time.Second)
	b.waitLine("b-started", 10*time.Second)
	if code := b.wait(10 * time.Second); code != 0 {
		t.Errorf("b exit %d\nstderr:\n%s", code, b.errOut())
	}
	if out := b.out(); strings.Contains(out, "OVERLAP") {
		t.Errorf("the next holder's command ran beside the old group:\n%s", out)
	}
}

// A frozen supervisor (SIGSTOP) cannot keep baton, nor the command, past a
// stop: after the grace and a slack baton kills it and the command's group,
// releases and exits.
func TestFrozenSupervisorIsKilledWithItsCommandOnStop(t *testing.T) {
	const grace = time.Second
	a := start(t, "lock", "supervisor-frozen", "--ttl", "5s", "--grace", grace.String(), "--", "sh", "-c", "sleep 600 & sleep 600")
	pgid := commandGroup(t, a, 3)
	sup := supervisorOf(t, a, pgid)
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(sup, syscall.SIGKILL) })
	sent := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := a.wait(grace + 10*time.Second)
	waitGroupGone(t, pgid, time.Second)
	if code != cli.ExitError {
		t.Errorf("exit %d, want %d (the supervisor was killed)\nstderr:\n%s", code, cli.ExitError, a.errOut())
	}
	if n := keyCount(t, "/baton/v1/lock/supervisor-frozen/"); n != 0 {
		t.Errorf("%d keys left: the lock was not released", n)
	}
	t.Logf("baton exited %v after SIGTERM with its supervisor frozen (grace %v)", time.Since(sent), grace)
}
