package dev_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/dev"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// startDev runs baton dev in this process until the returned stop is
// called, and returns its endpoint.
func startDev(t *testing.T, dir, listen, peer string) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- clitest.RunTo(ctx, "", &out, &errOut, "dev", "--data-dir", dir, "--listen", listen, "--listen-peer", peer)
	}()
	clitest.WaitFor(t, func() bool {
		select {
		case code := <-done:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "etcd serving at http://"+listen)
	})
	return func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(15 * time.Second):
			t.Fatal("dev did not stop")
			return -1
		}
	}
}

func TestDevKeepsDataAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	listen, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	connect := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{listen}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		return cli
	}
	ctx := clitest.TestContext(t)

	stop := startDev(t, dir, listen, peer)
	cli := connect()
	if _, err := cli.Put(ctx, "kept", "yes"); err != nil {
		t.Fatal(err)
	}
	_ = cli.Close()
	if code := stop(); code != cmdutil.ExitOK {
		t.Fatalf("dev exit %d", code)
	}

	stop = startDev(t, dir, listen, peer)
	cli = connect()
	resp, err := cli.Get(ctx, "kept")
	_ = cli.Close()
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "yes" {
		t.Errorf("after restart: %v %v", resp, err)
	}
	if code := stop(); code != cmdutil.ExitOK {
		t.Fatalf("dev exit %d", code)
	}
}

func TestDevSettingsTuneChains(t *testing.T) {
	var order []string
	s := &dev.DevSettings{}
	s.Tune(func(*embed.Config) { order = append(order, "a") })
	s.Tune(func(*embed.Config) { order = append(order, "b") })
	s.Config.Tune(embed.NewConfig())
	if strings.Join(order, "") != "ab" {
		t.Errorf("tune order %v, want a then b", order)
	}
}
