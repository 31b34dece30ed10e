package debughttp_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/integration/etcdtest"
)

// srv is the package's one embedded etcd.
var srv *etcdtest.Server

func TestMain(m *testing.M) {
	s, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(
			// etcd's embedded server leaves these behind until process exit.
			goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
			goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
