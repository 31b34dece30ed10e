package cluster_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := cluster.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestKillLeaderRestartOnData kills the leader, sees another elected and
// the data still served, then restarts the killed member on its data and
// reads through it alone.
func TestKillLeaderRestartOnData(t *testing.T) {
	c := cluster.Start(t, 3)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	old, err := c.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kill took %v", time.Since(start))
	if old.Running() {
		t.Fatal("killed member still running")
	}
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lead == old {
		t.Fatal("killed member still leads")
	}
	t.Logf("new leader %s after %v", lead.Name(), time.Since(start))
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("put with a member down: %v", err)
	}
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	one := c.Client(t, old.Endpoint())
	resp, err := one.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2" {
		t.Fatalf("restarted member serves %v, want k=v2", resp.Kvs)
	}
}

// TestQuorumLossAndRestore stops two of three members, sees writes fail,
// restarts both together and sees writes succeed.
func TestQuorumLossAndRestore(t *testing.T) {
	c := cluster.Start(t, 3)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms := c.Members()
	ms[0].Kill()
	ms[1].Kill()
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	_, err := cli.Put(wctx, "k", "v")
	wcancel()
	if err == nil {
		t.Fatal("put succeeded without a quorum")
	}
	if err := c.Restart(ms[0], ms[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put after restore: %v", err)
	}
}

// TestPartition cuts a proxied client off from every member and lets it
// back.
func TestPartition(t *testing.T) {
	c := cluster.Start(t, 3)
	cli, part := c.Proxied(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	part.Blackhole()
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := cli.Get(wctx, "k")
	wcancel()
	if err == nil {
		t.Fatal("get succeeded through a blackhole")
	}
	part.Restore()
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatalf("get after restore: %v", err)
	}
}

// TestCutPeers cuts the leader off from its peers, not from its clients:
// a linearizable read through it fails, a serializable one is served; the
// others elect a leader and take writes; once mended, a linearizable read
// through it sees them.
func TestCutPeers(t *testing.T) {
	c := cluster.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var other *cluster.Member
	for _, m := range c.Members() {
		if m != lead {
			other = m
		}
	}
	through, rest := c.Client(t, lead.Endpoint()), c.Client(t, other.Endpoint())
	if _, err := rest.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	lead.CutPeers()
	defer lead.MendPeers()
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = through.Get(rctx, "k")
	rcancel()
	if err == nil {
		t.Fatal("a linearizable read through a member cut from its peers was served")
	}
	if resp, err := through.Get(ctx, "k", clientv3.WithSerializable()); err != nil || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("serializable read through the cut member: %v, %v; want it served", resp, err)
	}
	put := func(cli *clientv3.Client, what string) error {
		for i := 0; i < 50; i++ {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			_, err = cli.Put(pctx, "k", what)
			pcancel()
			if err == nil {
				return nil
			}
		}
		return err
	}
	if err := put(rest, "after"); err != nil {
		t.Fatalf("the other members took no write: %v", err)
	}
	lead.MendPeers()
	var got string
	for i := 0; i < 50 && got != "after"; i++ {
		gctx, gcancel := context.WithTimeout(ctx, time.Second)
		if resp, err := through.Get(gctx, "k"); err == nil {
			got = string(resp.Kvs[0].Value)
		}
		gcancel()
	}
	if got != "after" {
		t.Fatalf("a linearizable read through the mended member got %q; want the write made while it was cut", got)
	}
}
