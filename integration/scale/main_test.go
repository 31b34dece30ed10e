package scale_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// TestMain runs the package's tests and fails the run if a goroutine is
// left behind. Run as "<test binary> child ...", it is a child process of
// the processes phase instead (scale.Child), as baton-scale child is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := scale.Child(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := m.Run()
	if code == 0 {
		if err := cluster.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
