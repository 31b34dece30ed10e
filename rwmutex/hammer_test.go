package rwmutex_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/history"
	"github.com/batonhq/baton/rwmutex"
)

var hammerFor = flag.Duration("hammer", 20*time.Second, "how long the hammer tests run (-short: 3s)")

func hammerDuration() time.Duration {
	if testing.Short() {
		return 3 * time.Second
	}
	return *hammerFor
}

type hammerConfig struct {
	ns      string
	workers int
	d       time.Duration
	newRW   func(cli *clientv3.Client) (*rwmutex.RWMutex, error)
}

type hammerResult struct {
	history.Report
	reads, writes int
}

// hammer runs workers that take a read lock (3 in 4) or the write lock,
// make fenced writes under /<ns>/work/ with random pauses, and unlock, one
// of them through a proxy that is blackholed for a while; it returns
// etcd's history of the run checked against the read/write rule.
func hammer(t *testing.T, cfg hammerConfig) hammerResult {
	admin := client(t)
	ctx := etcdtest.Context(t, cfg.d+60*time.Second)
	start, err := admin.Get(ctx, "/"+cfg.ns+"/")
	if err != nil {
		t.Fatal(err)
	}
	work := "/" + cfg.ns + "/work/"
	var prefix string
	var mu sync.Mutex
	var res hammerResult
	end := time.Now().Add(cfg.d)
	var wg sync.WaitGroup
	var proxy interface {
		Blackhole()
		Restore()
	}
	for i := range cfg.workers {
		cli := client(t)
		if i == 0 {
			pcli, p := proxied(t)
			cli, proxy = pcli, p
		}
		rw, err := cfg.newRW(cli)
		if err != nil {
			t.Fatal(err)
		}
		prefix = rw.Prefix()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rw.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for time.Now().Before(end) {
				shared := rng.IntN(4) != 0
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				var l *rwmutex.Lock
				var err error
				if shared {
					l, err = rw.RLock(actx)
				} else {
					l, err = rw.Lock(actx)
				}
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				if shared {
					res.reads++
				} else {
					res.writes++
				}
				mu.Unlock()
				for range 1 + rng.IntN(3) {
					wctx, cancel := context.WithTimeout(l.Context(), 2*time.Second)
					_, _ = l.Txn(wctx).Then(clientv3.OpPut(work+fmt.Sprint(i), l.Key())).Commit()
					cancel()
					time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
				}
				_ = l.Unlock(context.Background())
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}()
	}
	time.AfterFunc(cfg.d/3, func() {
		proxy.Blackhole()
		time.AfterFunc(3*time.Second, proxy.Restore)
	})
	wg.Wait()
	events, err := history.Record(ctx, admin, "/"+cfg.ns+"/", start.Header.Revision+1)
	if err != nil {
		t.Fatal(err)
	}
	res.Report = history.Check(events, prefix, work, history.RWMutex{IsReader: rwmutex.IsReader})
	return res
}

// TestHammerNoReaderWithAWriterNoTwoWriters: 16 clients mixing read and
// write locks, one cut off for a while; etcd's history shows every fenced
// write made by a key allowed to hold, never a writer acting beside
// anyone, and locks granted in token order.
func TestHammerNoReaderWithAWriterNoTwoWriters(t *testing.T) {
	d := hammerDuration()
	r := hammer(t, hammerConfig{ns: "rwhammer", workers: 16, d: d, newRW: func(cli *clientv3.Client) (*rwmutex.RWMutex, error) {
		return rwmutex.New(cli, "catalog", rwmutex.WithTTL(2*time.Second), rwmutex.WithNamespace("rwhammer"))
	}})
	for i, v := range r.Violations {
		if i == 10 {
			t.Errorf("... %d more", len(r.Violations)-10)
			break
		}
		t.Error(v)
	}
	if r.Writes < 50 || r.MaxTogether < 2 || r.writes == 0 {
		t.Fatalf("the run proved little: %d fenced writes, %d write locks, at most %d acting at once", r.Writes, r.writes, r.MaxTogether)
	}
	t.Logf("%v: %d read and %d write locks, %d fenced writes, at most %d readers acting at one revision", d, r.reads, r.writes, r.Writes, r.MaxTogether)
}

// TestHistoryCheckerCatchesReadersBesideAWriter plants a bug (readers do
// not wait for writers) and expects the checker to report it.
func TestHistoryCheckerCatchesReadersBesideAWriter(t *testing.T) {
	r := hammer(t, hammerConfig{ns: "rwplanted", workers: 16, d: 2 * time.Second, newRW: func(cli *clientv3.Client) (*rwmutex.RWMutex, error) {
		return rwmutex.NewReadersIgnoreWriters(cli, "catalog", rwmutex.WithTTL(2*time.Second), rwmutex.WithNamespace("rwplanted"))
	}})
	if len(r.Violations) == 0 {
		t.Fatalf("the checker found nothing wrong with readers that ignore writers (%d writes)", r.Writes)
	}
	if !strings.Contains(strings.Join(r.Violations, "\n"), "not allowed to hold") {
		t.Fatalf("violations do not name the reader: %v", r.Violations[:min(len(r.Violations), 5)])
	}
	t.Logf("%d violations, first: %s", len(r.Violations), r.Violations[0])
}
