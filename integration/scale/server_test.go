package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// Locks held on a few sessions in a few namespaces cost the server one
// watch per session and namespace, whatever their number; Close leaves no
// key (but each namespace's release mark) and no watcher.
func TestServerCostIsOneWatchPerSessionAndNamespace(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := scale.ServerCostConfig{Locks: 200, Sessions: 2, Namespaces: 2, Waiters: 20, Clients: 2, Deadline: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := scale.MeasureServerCost(ctx, srv.Endpoint(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.HeldWatchers < 1 || res.HeldWatchers > float64(cfg.Sessions*cfg.Namespaces) {
		t.Errorf("%.0f watchers for %d locks on %d sessions × %d namespaces, want at most %d", res.HeldWatchers, cfg.Locks, cfg.Sessions, cfg.Namespaces, cfg.Sessions*cfg.Namespaces)
	}
	if res.KeysPerLock < 1 {
		t.Errorf("%.2f keys per held lock at the server", res.KeysPerLock)
	}
	if res.KeysLeft != 0 || res.WatchersLeft > 0 {
		t.Errorf("%d keys and %.0f watchers left after Close", res.KeysLeft, res.WatchersLeft)
	}
	if res.WatchersPerWaiter > 1.2 {
		t.Errorf("%.2f watchers per waiter, want one (its predecessor's key)", res.WatchersPerWaiter)
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
