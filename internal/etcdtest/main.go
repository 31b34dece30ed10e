package etcdtest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// Main is a package's TestMain: it starts one member that the package's
// tests share, runs them, stops the member, and fails the run if any
// goroutine is left behind (Leaked).
//
//	var srv *etcdtest.Server
//	func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }
func Main(m *testing.M, srv **Server, cfg ...Config) {
	var c Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	s, err := New(c)
	if errors.Is(err, errNoModule) && os.Getenv("BATON_ETCD_REQUIRED") == "" {
		// Outside the repository (go test all in an application), with no
		// BATON_ETCD_BIN: nothing to test against.
		fmt.Fprintln(os.Stderr, "etcdtest: skipping the package's tests:", err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := Leaked(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
