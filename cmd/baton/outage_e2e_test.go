package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// lastEvent is the last acquired or lost event baton -o json printed.
func lastEvent(p *proc) string {
	last := ""
	sc := bufio.NewScanner(strings.NewReader(p.errOut()))
	for sc.Scan() {
		var ev struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && (ev.Event == "acquired" || ev.Event == "lost") {
			last = ev.Event
		}
	}
	return last
}

func running(p *proc) bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// TestQuorumLossIsWaitedOut stops two of three members for 20 s while a
// lock is held and awaited and two candidates campaign: the waiter and
// the candidates live through it, the waiter runs its command after
// recovery, and exactly one candidate leads within TTL + 2 s.
func TestQuorumLossIsWaitedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s outage")
	}
	const ttl, outage = 4 * time.Second, 20 * time.Second
	c := cluster.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	holder := startOn(t, eps, "lock", "q", "--ttl", ttl.String(), "--", "sh", "-c", "echo holder-running; exec sleep 600")
	holder.waitLine("holder-running", 15*time.Second)
	waiter := startOn(t, eps, "lock", "q", "--ttl", ttl.String(), "--timeout", "120s", "--", "sh", "-c", "echo waiter-running")
	waiter.waitLine(`waiting for lock "q": held by`, 15*time.Second)
	cands := []*proc{
		startOn(t, eps, "-o", "json", "elect", "e", "c1", "--ttl", ttl.String(), "--", "sh", "-c", "exec sleep 600"),
		startOn(t, eps, "-o", "json", "elect", "e", "c2", "--ttl", ttl.String(), "--", "sh", "-c", "exec sleep 600"),
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a, b := cands[0].errOut(), cands[1].errOut()
		if strings.Contains(a+b, `"event":"acquired"`) && strings.Contains(a+b, `"event":"waiting"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader and waiting candidate\nc1:\n%s\nc2:\n%s", a, b)
		}
	}

	ms := c.Members()
	ms[0].Kill()
	ms[1].Kill()
	time.Sleep(outage)
	for name, p := range map[string]*proc{"waiter": waiter, "c1": cands[0], "c2": cands[1]} {
		if !running(p) {
			t.Fatalf("%s did not survive the outage: exit %d\nstderr:\n%s", name, p.code, p.errOut())
		}
	}
	if !strings.Contains(waiter.errOut(), "etcd unreachable, still waiting") {
		t.Errorf("the waiter did not say it kept waiting:\n%s", waiter.errOut())
	}
	if err := c.Restart(ms[0], ms[1]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()

	// Exactly one candidate leads, and etcd agrees, within TTL + 2 s.
	cli3 := c.Client(t)
	var leader string
	for leader == "" {
		var leading []string
		for i, p := range cands {
			if lastEvent(p) == "acquired" {
				leading = append(leading, []string{"c1", "c2"}[i])
			}
		}
		if len(leading) > 1 {
			t.Fatalf("both candidates say they lead %v after recovery", time.Since(recovered))
		}
		if len(leading) == 1 {
			gctx, gcancel := context.WithTimeout(ctx, time.Second)
			resp, err := cli3.Get(gctx, "/baton/v1/election/e/", clientv3.WithFirstCreate()...)
			gcancel()
			if err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == leading[0] {
				leader = leading[0]
				break
			}
		}
		if time.Since(recovered) > ttl+2*time.Second {
			t.Fatalf("no single leader %v after recovery\nc1:\n%s\nc2:\n%s", time.Since(recovered), cands[0].errOut(), cands[1].errOut())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s leads %v after recovery (TTL %v)", leader, time.Since(recovered), ttl)

	// The holder lost its lock in the outage; the waiter then runs.
	if code := holder.wait(30 * time.Second); code != cli.ExitOwnershipLost {
		t.Errorf("holder exit %d, want %d\nstderr:\n%s", code, cli.ExitOwnershipLost, holder.errOut())
	}
	waiter.waitLine("waiter-running", 30*time.Second)
	if code := waiter.wait(10 * time.Second); code != 0 {
		t.Errorf("waiter exit %d\nstderr:\n%s", code, waiter.errOut())
	}
	t.Logf("waiter ran %v after recovery", time.Since(recovered))
	for _, p := range cands {
		if !running(p) {
			t.Errorf("a candidate exited after recovery: %d\nstderr:\n%s", p.code, p.errOut())
		}
	}
}
