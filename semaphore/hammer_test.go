package semaphore_test

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
	"github.com/batonhq/baton/semaphore"
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
	limit   int
	workers int
	d       time.Duration
	// newSem builds worker i's semaphore on cli.
	newSem func(cli *clientv3.Client) (*semaphore.Semaphore, error)
}

// hammer runs workers that acquire, make fenced writes under /<ns>/work/
// with random pauses, and release, one of them through a proxy that is
// blackholed for a while; it returns etcd's history of the run, checked
// against a semaphore of cfg.limit permits.
func hammer(t *testing.T, cfg hammerConfig) (history.Report, map[int][]int64) {
	admin := client(t)
	ctx := etcdtest.Context(t, cfg.d+60*time.Second)
	start, err := admin.Get(ctx, "/"+cfg.ns+"/")
	if err != nil {
		t.Fatal(err)
	}
	work := "/" + cfg.ns + "/work/"
	var prefix string
	var mu sync.Mutex
	tokens := map[int][]int64{} // per worker, in the order its grants came
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
		s, err := cfg.newSem(cli)
		if err != nil {
			t.Fatal(err)
		}
		prefix = s.Prefix()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for time.Now().Before(end) {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				p, err := s.Acquire(actx)
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				tokens[i] = append(tokens[i], int64(p.Token()))
				mu.Unlock()
				for range 1 + rng.IntN(3) {
					wctx, cancel := context.WithTimeout(p.Context(), 2*time.Second)
					_, _ = p.Txn(wctx).Then(clientv3.OpPut(work+fmt.Sprint(i), p.Key())).Commit()
					cancel()
					time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
				}
				_ = p.Release(context.Background())
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}()
	}
	// Cut the proxied worker off past its TTL, a third into the run.
	time.AfterFunc(cfg.d/3, func() {
		proxy.Blackhole()
		time.AfterFunc(3*time.Second, proxy.Restore)
	})
	wg.Wait()
	events, err := history.Record(ctx, admin, "/"+cfg.ns+"/", start.Header.Revision+1)
	if err != nil {
		t.Fatal(err)
	}
	return history.Check(events, prefix, work, history.Semaphore{Limit: cfg.limit}), tokens
}

// TestHammerNeverMoreThanLimitFIFOTokensIncrease: 16 clients on a
// semaphore of 3, one of them cut off for a while; etcd's history shows
// every fenced write made by one of the 3 oldest keys, never more than 3
// acting at one revision, and permits granted in token order.
func TestHammerNeverMoreThanLimitFIFOTokensIncrease(t *testing.T) {
	d := hammerDuration()
	r, tokens := hammer(t, hammerConfig{ns: "hammer", limit: 3, workers: 16, d: d,
		newSem: func(cli *clientv3.Client) (*semaphore.Semaphore, error) {
			return semaphore.New(cli, "jobs", 3, semaphore.WithTTL(2*time.Second), semaphore.WithNamespace("hammer"))
		}})
	for i, v := range r.Violations {
		if i == 10 {
			t.Errorf("... %d more", len(r.Violations)-10)
			break
		}
		t.Error(v)
	}
	if r.Writes < 50 || r.MaxTogether != 3 {
		t.Fatalf("the run proved little: %d fenced writes, at most %d holders acting at once", r.Writes, r.MaxTogether)
	}
	for w, ts := range tokens {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("worker %d: token %d after %d", w, ts[i], ts[i-1])
			}
		}
	}
	t.Logf("%v: %d grants, %d fenced writes, at most %d holders acting at one revision", d, r.Grants, r.Writes, r.MaxTogether)
}

// TestHistoryCheckerCatchesAnOverLimitSemaphore plants a bug (4 may hold
// under a stored limit of 3) and expects the checker to report it.
func TestHistoryCheckerCatchesAnOverLimitSemaphore(t *testing.T) {
	r, _ := hammer(t, hammerConfig{ns: "planted", limit: 3, workers: 16, d: 2 * time.Second,
		newSem: func(cli *clientv3.Client) (*semaphore.Semaphore, error) {
			return semaphore.NewOverLimit(cli, "jobs", 3, 1, semaphore.WithTTL(2*time.Second), semaphore.WithNamespace("planted"))
		}})
	if len(r.Violations) == 0 {
		t.Fatalf("the checker found nothing wrong with a semaphore letting 4 hold (%d writes, at most %d together)", r.Writes, r.MaxTogether)
	}
	if !strings.Contains(strings.Join(r.Violations, "\n"), "not allowed to hold") {
		t.Fatalf("violations do not name the over-limit holder: %v", r.Violations[:min(len(r.Violations), 5)])
	}
	t.Logf("%d violations, first: %s", len(r.Violations), r.Violations[0])
}
