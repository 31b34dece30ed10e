package scale_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// Locks held on a few sessions in a few namespaces cost the server one
// watcher per held key, on one watch stream per session, whatever the
// namespaces; Close leaves no key (but each namespace's release mark) and
// no watcher.
func TestServerCostIsOneWatcherPerHeldKeyOnOneStreamPerSession(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := scale.ServerCostConfig{Locks: 200, Sessions: 2, Namespaces: 2, Waiters: 20, Clients: 2, Deadline: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := scale.MeasureServerCost(ctx, srv.Endpoint(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.HeldWatchers < 1 || res.HeldWatchers > float64(cfg.Locks) || res.HeldGrowth.WatchStreams > float64(cfg.Sessions) {
		t.Errorf("%.0f watchers on %.0f streams for %d locks on %d sessions × %d namespaces, want at most %d on %d", res.HeldWatchers, res.HeldGrowth.WatchStreams, cfg.Locks, cfg.Sessions, cfg.Namespaces, cfg.Locks, cfg.Sessions)
	}
	if res.KeysPerLock < 1 {
		t.Errorf("%.2f keys per held lock at the server", res.KeysPerLock)
	}
	if res.KeysLeft != 0 || res.WatchersLeft > 0 {
		t.Errorf("%d keys and %.0f watchers left after Close", res.KeysLeft, res.WatchersLeft)
	}
	if res.WatchersPerWaiter > 2.2 {
		t.Errorf("%.2f watchers per waiter, want two (its own key's and its predecessor's)", res.WatchersPerWaiter)
	}
}

func TestServerCostRefusesBadConfig(t *testing.T) {
	cfg := scale.ServerCostConfig{Locks: 3, Sessions: 2, Namespaces: 2, Waiters: 1, Clients: 2, Deadline: time.Minute}
	_, err := scale.MeasureServerCost(context.Background(), "http://127.0.0.1:1", cfg)
	for _, want := range []string{"Locks must be at least Sessions × Namespaces (4)", "Waiters must be at least Clients"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("MeasureServerCost(%+v) = %v, want an error containing %q", cfg, err, want)
		}
	}
}

// ReadServer finds the member's own metrics in the process's registry.
func TestReadServerFindsTheMembersMetrics(t *testing.T) {
	etcdtest.Start(t)
	s, err := scale.ReadServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.DBBytes <= 0 {
		t.Errorf("db size %.0f bytes", s.DBBytes)
	}
}

// A watcher of one key costs the member a few hundred bytes of heap: what
// baton's held keys and waiters cost it beside their keys (each has one;
// docs/scaling.md). Measured with the member in this process, after GC,
// for 20,000 watches made on one raw watch stream (which keeps nothing per
// watch on this side); logged, and checked against a loose bound.
func TestAWatcherCostsTheMemberAFewHundredBytes(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ws, err := etcdserverpb.NewWatchClient(cli.ActiveConnection()).Watch(t.Context(), grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{}, 1<<16)
	go func() {
		for {
			if _, err := ws.Recv(); err != nil {
				return
			}
			answered <- struct{}{}
		}
	}()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	const n = 20000
	before := heap()
	for i := range n {
		key := fmt.Sprintf("/scale-watcher/v1/lock/held-%d/694d%012x", i, i)
		if err := ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: &etcdserverpb.WatchCreateRequest{
			Key: []byte(key), WatchId: int64(i + 1), Filters: []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-answered
	}
	per := float64(heap()-before) / n
	t.Logf("FIGURE: %d watchers of one key each cost the member %.0f B of heap each", n, per)
	if per > 4096 {
		t.Errorf("a watcher costs the member %.0f B, more than 4 KiB", per)
	}
}
