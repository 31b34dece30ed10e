package etcdtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// IgnoredGoroutines are goroutines the embedded etcd server leaves behind
// until the process exits; leak checks skip them.
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	}
}

// Main is a package's TestMain: it starts one member that the package's
// tests share, runs them, stops the member, and fails the run if any
// goroutine is left behind.
//
//	var srv *etcdtest.Server
//	func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }
func Main(m *testing.M, srv **Server, cfg ...Config) {
	var c Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	s, err := New(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := goleak.Find(IgnoredGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
