package robustness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// childCmd runs this test binary again as a child.
func childCmd(string) *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }

// batonBin is the baton CLI built once for the runs that use it.
var batonBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func buildBaton(t *testing.T) string {
	t.Helper()
	batonBin.once.Do(func() {
		if batonBin.dir, batonBin.err = os.MkdirTemp("", "baton-robustness-"); batonBin.err != nil {
			return
		}
		batonBin.path = filepath.Join(batonBin.dir, "baton")
		out, err := exec.Command("go", "build", "-o", batonBin.path, "github.com/batonhq/baton/cmd/baton").CombinedOutput()
		if err != nil {
			batonBin.err = &buildError{err: err, out: string(out)}
		}
	})
	if batonBin.err != nil {
		t.Fatal(batonBin.err)
	}
	return batonBin.path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build ./cmd/baton: " + e.err.Error() + "\n" + e.out }

func cleanupBaton() {
	if batonBin.dir != "" {
		_ = os.RemoveAll(batonBin.dir)
	}
}

// logWriter sends a run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestShortRun is a short run of every traffic kind and fault, with a
// holder process and the CLI variant, on an embedded cluster: it must end
// with no violation. `make robustness` runs longer ones.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s run; make robustness runs longer ones")
	}
	c := cluster.Start(t, 3)
	rep, err := Run(context.Background(), Config{
		Target: Embedded{C: c}, Seed: 1, Duration: 10 * time.Second, Workers: 3, Children: 1,
		ChildCmd: childCmd, Baton: buildBaton(t), Log: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations (seed %d)", len(rep.Violations), rep.Seed)
	}
	if rep.Operations() == 0 || rep.Histories == 0 {
		t.Errorf("nothing ran: %s", rep.Summary())
	}
}
