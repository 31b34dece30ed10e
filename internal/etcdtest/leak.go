package etcdtest

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Leaked reports the goroutines still running after a package's tests,
// waiting up to 5 s for ones on their way out. It is the check goleak
// makes, kept here so that the library's module requires no test-only
// module an importer would inherit; the integration module uses goleak.
func Leaked() error {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		left = running()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("leak check: %d goroutine(s) left behind:\n\n%s", len(left), strings.Join(left, "\n\n"))
}

// ignored are goroutines the runtime and the testing package keep.
var ignored = []string{
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*M).",
	"testing.runFuzz",
	"runtime/trace.",
}

// running lists the stacks of every goroutine but the caller's and the
// ignored ones.
func running() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	var out []string
next:
	for _, st := range stacks[1:] { // the first is the caller's
		for _, ig := range ignored {
			if strings.Contains(st, ig) {
				continue next
			}
		}
		if st = strings.TrimSpace(st); st != "" {
			out = append(out, st)
		}
	}
	return out
}
