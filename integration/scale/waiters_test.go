package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// smallWaiters is a queue CI can afford.
func smallWaiters(impl string) scale.WaitersConfig {
	return scale.WaitersConfig{Impl: impl, Waiters: 40, Clients: 4, Rounds: 2, TTL: 10 * time.Second, Deadline: time.Minute}
}

// A queue of waiters spread over several clients drains in the order it
// formed (etcd's history: each waiter's key is deleted after every key
// created before it), one holder at a time, and once every waiter is
// closed no key is left under the name and the server's watchers are back
// to where they were. Raw etcd concurrency, run the same way, too.
func TestWaitersDrainInOrderAndLeaveNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	for _, impl := range []string{"baton", "raw"} {
		t.Run(impl, func(t *testing.T) {
			cfg := smallWaiters(impl)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := scale.Waiters(ctx, srv.Endpoint(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Handoffs != cfg.Waiters*cfg.Rounds {
				t.Errorf("%d handoffs, want %d", res.Handoffs, cfg.Waiters*cfg.Rounds)
			}
			if res.OutOfOrder != 0 || res.DoubleHolders != 0 {
				t.Errorf("%d waiters held out of order, %d times two held at once", res.OutOfOrder, res.DoubleHolders)
			}
			if res.KeysLeft != 0 || res.WatchersLeft > 0 {
				t.Errorf("%d keys and %.0f watchers left after Close", res.KeysLeft, res.WatchersLeft)
			}
			if res.KeysPerWaiter < 1 || res.WatchersPerWaiter > 2.2 {
				t.Errorf("the standing queue showed %.2f keys and %.2f watchers per waiter at the server, want one key and at most two watches each (its own key's and the key ahead's)", res.KeysPerWaiter, res.WatchersPerWaiter)
			}
			if !res.OK() {
				t.Error("result not OK")
			}
		})
	}
}

// Every bad size is refused before anything starts, naming the field and
// its bound.
func TestWaitersRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*scale.WaitersConfig)
		want string
	}{
		{"no waiters", func(c *scale.WaitersConfig) { c.Waiters = 0 }, "Waiters must be at least 1"},
		{"negative clients", func(c *scale.WaitersConfig) { c.Clients = -1 }, "Clients must be at least 1"},
		{"more clients than waiters", func(c *scale.WaitersConfig) { c.Clients = c.Waiters + 1 }, "Clients must be at most Waiters"},
		{"no rounds", func(c *scale.WaitersConfig) { c.Rounds = 0 }, "Rounds must be at least 1"},
		{"short TTL", func(c *scale.WaitersConfig) { c.TTL = time.Second }, "TTL must be whole seconds and at least 2s"},
		{"unknown impl", func(c *scale.WaitersConfig) { c.Impl = "zk" }, "Impl must be baton or raw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallWaiters("baton")
			tc.edit(&cfg)
			_, err := scale.Waiters(context.Background(), "http://127.0.0.1:1", cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Waiters(%+v) = %v, want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}
