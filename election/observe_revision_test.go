package election_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
)

// Several candidates' keys deleted in one revision (an operator deleting
// the election's prefix): Observe converges on "no leader", not on a
// candidate that went in the same revision as the leader.
func TestObserveAppliesAllEventsOfARevision(t *testing.T) {
	cli := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := newElection(t, cli, "edge-one-revision")
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cli.Put(ctx, e.Prefix()+k, k); err != nil {
			t.Fatal(err)
		}
	}
	ch := e.Observe(ctx)
	first := <-ch
	if first.Value != "a" {
		t.Fatalf("first state = %+v, want leader a", first)
	}
	if _, err := cli.Delete(ctx, e.Prefix(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	var last election.Leader
	timeout := time.After(3 * time.Second)
	for {
		select {
		case l := <-ch:
			last = l
			if l.IsZero() {
				return
			}
		case <-timeout:
			t.Fatalf("Observe's last state is %+v; every candidate was deleted", last)
		}
	}
}
