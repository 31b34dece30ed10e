package mutex_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/history"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

var setHammerFor = flag.Duration("set-hammer", 30*time.Second, "how long the set hammer runs (-short: 3s)")

// TestSetHammerNoTwoHoldersOfANameNoDeadlock: 8 workers on their own
// clients take random pairs and triples of 5 names (in random orders)
// through Sets, each with plain Mutexes of the same names mixed in. Each
// holder writes, through a durable fencing guard per name, to a work key
// per name with its key of that name as the value. etcd's history then
// shows, name by name, that every write came from the name's only allowed
// holder, that tokens rise from holder to holder, and every guard admitted
// the set's token; every worker finishes every Lock it started.
func TestSetHammerNoTwoHoldersOfANameNoDeadlock(t *testing.T) {
	d := *setHammerFor
	if testing.Short() {
		d = 3 * time.Second
	}
	const ns = "sethammer"
	names := []string{"acct-1", "acct-2", "acct-3", "acct-4", "acct-5"}
	admin := client(t)
	ctx := etcdtest.Context(t, d+90*time.Second)
	start, err := admin.Get(ctx, "/"+ns+"/")
	if err != nil {
		t.Fatal(err)
	}
	work := "/" + ns + "/work/"
	end := time.Now().Add(d)
	var mu sync.Mutex
	sets, plains, writes, stale := 0, 0, 0, 0
	var failures []string
	var wg sync.WaitGroup
	for w := range 8 {
		cli := client(t)
		guard, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 23))
			// A slow machine (-race, load) runs on, up to 3 times as long,
			// until the run has taken enough set locks to prove something.
			more := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return sets < 20 && time.Now().Before(end.Add(2*d))
			}
			for time.Now().Before(end) || more() {
				perm := rng.Perm(len(names))
				pick := make([]string, 2+rng.IntN(2))
				for i := range pick {
					pick[i] = names[perm[i]]
				}
				plain := rng.IntN(5) == 0
				if plain {
					pick = pick[:1]
				}
				opts := []mutex.Option{mutex.WithNamespace(ns), mutex.WithSession(sess)}
				var l *mutex.Lock
				var closeFn func() error
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if plain {
					m, err := mutex.New(cli, pick[0], opts...)
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					closeFn = m.Close
					l, err = m.Lock(lctx)
				} else {
					s, err := mutex.NewSet(cli, pick, opts...)
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					closeFn = s.Close
					l, err = s.Lock(lctx)
				}
				cancel()
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("worker %d: lock %v: %v", w, pick, err))
					mu.Unlock()
					_ = closeFn()
					return // a Lock that does not finish in 20 s is a deadlock
				}
				for i, name := range pick {
					wctx, wcancel := context.WithTimeout(l.Context(), 5*time.Second)
					_, err := guard.Write(wctx, l, name, clientv3.OpPut(work+name+"/"+fmt.Sprint(w), l.Keys()[i]))
					wcancel()
					mu.Lock()
					if err != nil {
						stale++
						failures = append(failures, fmt.Sprintf("worker %d: guarded write of %s with token %d: %v", w, name, l.Token(), err))
					} else {
						writes++
					}
					mu.Unlock()
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("worker %d: unlock %v: %v", w, pick, err))
					mu.Unlock()
				}
				_ = closeFn()
				mu.Lock()
				if plain {
					plains++
				} else {
					sets++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	events, err := history.Record(ctx, admin, "/"+ns+"/", start.Header.Revision+1)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, name := range names {
		prefix := "/" + ns + "/v1/lock/" + name + "/"
		r := history.Check(events, prefix, work+name+"/", history.Semaphore{Limit: 1})
		for i, v := range r.Violations {
			if i == 10 {
				t.Errorf("%s: ... %d more", name, len(r.Violations)-10)
				break
			}
			t.Errorf("%s: %s", name, v)
		}
		total += r.Writes
		// Tokens of a name's successive writers never go down.
		var toks []int64
		creates := map[string]int64{}
		for _, ev := range events {
			switch {
			case strings.HasPrefix(ev.Key, prefix) && !ev.Delete:
				creates[ev.Key] = ev.Create
			case strings.HasPrefix(ev.Key, work+name+"/") && !ev.Delete:
				toks = append(toks, creates[ev.Value])
			}
		}
		if !sort.SliceIsSorted(toks, func(i, j int) bool { return toks[i] < toks[j] }) {
			t.Errorf("%s: tokens of successive writers not increasing: %v", name, toks)
		}
	}
	if sets < 10 || total < 30 {
		t.Fatalf("the run proved little: %d set locks, %d plain, %d fenced writes", sets, plains, total)
	}
	t.Logf("%v: %d set locks and %d plain locks by 8 workers, %d guarded writes (%d refused), no two holders of a name at any revision", d, sets, plains, writes, stale)
}
