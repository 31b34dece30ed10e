package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

func smallHeld() scale.HeldConfig {
	return scale.HeldConfig{Locks: 300, Small: 30, Runs: 1, TTL: 2 * time.Second, Window: 2 * time.Second, Deadline: time.Minute}
}

// Locks held on one baton session cost no goroutine each, one key and one
// watcher (of that key) each at the server, all on the session's one watch
// stream; raw etcd concurrency takes the same count. (Heap and time are
// figures of the harness, not checked here; in this process the heap
// includes the server's.)
func TestHeldOnOneSessionCostsNoGoroutineAndOneStream(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := smallHeld()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := scale.Held(ctx, srv.Endpoint(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.GoroutinesPerLock >= 0.1 {
		t.Errorf("%.3f goroutines per held lock, want none per lock", res.GoroutinesPerLock)
	}
	if res.Server.Keys < float64(cfg.Locks) {
		t.Errorf("the server gained %.0f keys for %d held locks", res.Server.Keys, cfg.Locks)
	}
	if res.Server.Watchers > float64(cfg.Locks)+2 || res.Server.WatchStreams > 2 {
		t.Errorf("the server gained %.0f watchers on %.0f streams for %d locks on one session, want one per lock on one stream", res.Server.Watchers, res.Server.WatchStreams, cfg.Locks)
	}
	if len(res.AcquireSeconds.Runs) != 1 || len(res.RawAcquireSeconds.Runs) != 1 || len(res.KeepAlivesPerTTLSmall.Runs) != 1 {
		t.Errorf("runs recorded: baton %v, raw %v, small %v; want one each", res.AcquireSeconds.Runs, res.RawAcquireSeconds.Runs, res.KeepAlivesPerTTLSmall.Runs)
	}
}

func TestHeldRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*scale.HeldConfig)
		want string
	}{
		{"no locks", func(c *scale.HeldConfig) { c.Locks = 0 }, "Locks must be at least 1"},
		{"small above locks", func(c *scale.HeldConfig) { c.Small = c.Locks + 1 }, "Small must be between 0 and Locks"},
		{"negative runs", func(c *scale.HeldConfig) { c.Runs = -1 }, "Runs must be at least 1"},
		{"window within a TTL", func(c *scale.HeldConfig) { c.Window = time.Second }, "Window must be at least TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallHeld()
			tc.edit(&cfg)
			_, err := scale.Held(context.Background(), "http://127.0.0.1:1", cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Held(%+v) = %v, want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}
