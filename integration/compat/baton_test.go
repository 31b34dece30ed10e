package compat_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// batonBin is the baton CLI built once for the tests that run it.
var batonBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// baton builds ./cmd/baton on first use and returns the binary's path.
func baton(t *testing.T) string {
	t.Helper()
	batonBin.once.Do(func() {
		batonBin.dir, batonBin.err = os.MkdirTemp("", "baton-compat-")
		if batonBin.err != nil {
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
