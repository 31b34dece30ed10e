package mixed

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestStoppedStat(t *testing.T) {
	for _, c := range []struct {
		stat string
		want bool
	}{
		{"4242 (worker) T 1 4242 4242 0 -1", true},
		{"4242 (worker) S 1 4242 4242 0 -1", false},
		{"4242 (a) T (b)) R 1 4242", false}, // the name ends at the last ')'
		{"4242 (a) R (b)) T 1 4242", true},
		{"4242 (worker)", false},
		{"", false},
	} {
		if got := stoppedStat([]byte(c.stat)); got != c.want {
			t.Errorf("stoppedStat(%q) = %v, want %v", c.stat, got, c.want)
		}
	}
}

// A process that stopped itself for a freeze the test no longer waited
// for is resumed by its reader: a "freezing" report with nobody asking.
func TestALateSelfFreezeIsResumed(t *testing.T) {
	p := newProc(Build{Label: "new"}, 1, "mutex", &record{})
	resumed(t, lateSelfFreeze(t, p))
}

// A late report that comes while the runner holds the process stopped
// from outside leaves it stopped: the freeze recorded is the runner's,
// until it ends it; a stop of its own after that is resumed.
func TestALateSelfFreezeLeavesTheRunnersFreeze(t *testing.T) {
	p := newProc(Build{Label: "new"}, 1, "mutex", &record{})
	p.stopped = true // the runner gave up waiting and stopped it
	at := lateSelfFreeze(t, p)
	notResumed := func() {
		if _, err := os.Stat(at); err == nil {
			t.Fatal("a process the runner held stopped was resumed by a late report")
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		notResumed()
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)); err == nil && stoppedStat(stat) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never stopped")
		}
	}
	time.Sleep(300 * time.Millisecond) // a resume would come within 5 ms of the stop
	notResumed()
	p.mu.Lock()
	p.stopped = false // the runner's freeze ends
	p.mu.Unlock()
	resumed(t, at)
}

// lateSelfFreeze starts, as p, a process that reports a freeze, stops
// itself, and once resumed writes the file it returns; its reader runs.
func lateSelfFreeze(t *testing.T, p *proc) string {
	t.Helper()
	resumed := t.TempDir() + "/resumed"
	// It reports, then stops itself, as the worker's freezePoint does;
	// only a SIGCONT lets it write the file.
	p.cmd = exec.Command("sh", "-c", `echo '{"T":"freezing","At":1}'; kill -STOP $$; touch "$1"; exec sleep 30`, "sh", resumed)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		p.read(out)
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGKILL); <-p.done; _ = p.cmd.Wait() })
	return resumed
}

// resumed waits for a lateSelfFreeze process to write its file at.
func resumed(t *testing.T, at string) {
	t.Helper()
	const within = 10 * time.Second
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(at); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a process that stopped itself with nobody waiting for its freeze was not resumed in %v", within)
		}
	}
}
