package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/mutex"
)

// TestLocksListsAThousandLocksOnAThousandLeasesQuickly holds 1,000 locks,
// each on its own lease, and times `baton locks` (the best of five runs:
// the machine is shared) and the sequential library listing it replaces.
func TestLocksListsAThousandLocksOnAThousandLeasesQuickly(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,000 leases")
	}
	ctx := clitest.TestContext(t)
	const ns, n = "perf", 1000
	cli := clitest.Srv.Client(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				l, err := cli.Grant(ctx, 60)
				if err == nil {
					key := fmt.Sprintf("/%s/v1/lock/job-%04d/%x", ns, i, int64(l.ID))
					_, err = cli.Put(ctx, key, "host:1", clientv3.WithLease(l.ID))
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Warm the connection path once, as an operator's second run would.
	if code, _, errOut := clitest.Run(ctx, t, ns, "locks", "job-0001"); code != cmdutil.ExitOK {
		t.Fatalf("locks: %s", errOut)
	}
	best := time.Hour
	var out string
	for range 5 {
		began := time.Now()
		code, o, errOut := clitest.Run(ctx, t, ns, "-o", "json", "locks")
		if code != cmdutil.ExitOK {
			t.Fatalf("locks: exit %d: %s", code, errOut)
		}
		best, out = min(best, time.Since(began)), o
	}
	var v struct {
		Count int                `json:"count"`
		Locks []inspect.LockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Count != n || len(v.Locks) != n || v.Locks[0].TTLLeft <= 0 {
		t.Fatalf("locks listed %d (count %d), first %+v, %v", len(v.Locks), v.Count, v.Locks[0], err)
	}

	parBegan := time.Now()
	if _, err := keyspace.ListLocks(ctx, cli, ns, ""); err != nil {
		t.Fatal(err)
	}
	par := time.Since(parBegan)
	seqBegan := time.Now()
	if _, err := mutex.List(ctx, cli, mutex.WithNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	seq := time.Since(seqBegan)
	t.Logf("1,000 locks on 1,000 leases: baton locks %v (best of 5, connect included); listing alone %v; sequential mutex.List %v", best, par, seq)
	if best > 300*time.Millisecond && !clitest.RaceEnabled {
		t.Errorf("baton locks took %v, want under 300ms", best)
	}

	// The prefix is filtered by etcd: one name's keys, not the namespace.
	code, out, _ := clitest.Run(context.Background(), t, ns, "-o", "json", "locks", "job-09")
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.Count != 100 {
		t.Fatalf("locks job-09: exit %d, count %d", code, v.Count)
	}
}
