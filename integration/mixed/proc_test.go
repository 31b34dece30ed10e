package mixed

import (
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
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(resumed); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a process that stopped itself with nobody waiting for its freeze was not resumed in 10 s")
		}
	}
}
