package mutex_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/integration/netproxy"
)

// srv is the package's one embedded etcd; tests share it and use distinct
// lock names.
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
		if err := goleak.Find(goleakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var goleakOptions = []goleak.Option{
	// etcd's embedded server leaves these behind until process exit.
	goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}

// proxied returns a client whose traffic passes through a proxy the test
// can blackhole.
func proxied(t *testing.T) (*clientv3.Client, *netproxy.Proxy) {
	t.Helper()
	p, err := netproxy.New(srv.Endpoint()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	cli, err := srv.NewClient(p.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Restore()
		_ = cli.Close()
		_ = p.Close()
	})
	return cli, p
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keysUnder returns the keys under prefix.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// waitGone waits, by watching, until key does not exist.
func waitGone(t *testing.T, cli *clientv3.Client, key string, within time.Duration) {
	t.Helper()
	ctx := ctxTimeout(t, within)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("key %s still exists after %v", key, within)
}

// within fails the test if ch does not close within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}
