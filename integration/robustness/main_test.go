package robustness

import (
	"fmt"
	"os"
	"testing"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

func TestMain(m *testing.M) {
	if code, ok := ChildMain(); ok {
		os.Exit(code)
	}
	code := m.Run()
	cleanupBaton()
	if code == 0 {
		if err := cluster.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
