package scale_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
)

// smallShards is a shards phase CI can afford: this test binary run as 4
// member processes (TestMain dispatches "child") of a group of 64 shards,
// beside one of 16 at rest.
func smallShards() scale.ShardsConfig {
	return scale.ShardsConfig{Binary: os.Args[0], Members: 4, Shards: 64, RestShards: 16, TTL: 5 * time.Second,
		Rest: 2 * time.Second, Balance: 30 * time.Second, Deadline: 3 * time.Minute}
}

// TestShardsRollingRestart: every member process restarted in turn moves
// each of its shards away and back, no more (at most 2.2 × N in all, at
// least twice a member's share per restart), with no double ownership in
// etcd's history or at the fenced resource and nothing left in etcd.
func TestShardsRollingRestart(t *testing.T) {
	cfg := smallShards()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := scale.Shards(ctx, cfg, &progress)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if res.Restarts != cfg.Members {
		t.Errorf("%d restarts, want %d", res.Restarts, cfg.Members)
	}
	if least := 2 * (cfg.Shards / cfg.Members) * cfg.Members; res.Moves < least || res.Moves > res.MovesBound {
		t.Errorf("%d moves, want %d to %d", res.Moves, least, res.MovesBound)
	}
	if res.DoubleHistory != 0 || res.DoubleFenced != 0 || res.ChildErrors != 0 || res.KeysLeft != 0 {
		t.Errorf("double ownership %d (history) %d (fenced), %d child errors, %d keys left; want none",
			res.DoubleHistory, res.DoubleFenced, res.ChildErrors, res.KeysLeft)
	}
	// An enter and an exit per ownership: the initial ones, and each move's.
	if res.FencedWrites < 2*(cfg.Shards+res.Moves) {
		t.Errorf("%d fenced writes, want at least %d", res.FencedWrites, 2*(cfg.Shards+res.Moves))
	}
	if res.RestSmall.Stream == 0 || res.RestLarge.Stream == 0 {
		t.Errorf("no renewal counted at rest: %+v, %+v", res.RestSmall, res.RestLarge)
	}
}

// TestShardsRefusesBadConfig: every bad size is refused before any process
// starts, with the field and its bound named.
func TestShardsRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*scale.ShardsConfig)
		want string
	}{
		{"one member", func(c *scale.ShardsConfig) { c.Members = 1 }, "Members must be at least 2"},
		{"no shards", func(c *scale.ShardsConfig) { c.Shards = 0 }, "Shards must be 1 to 16384"},
		{"too many shards", func(c *scale.ShardsConfig) { c.Shards = 16385 }, "Shards must be 1 to 16384"},
		{"negative rest shards", func(c *scale.ShardsConfig) { c.RestShards = -1 }, "RestShards must be 0 to 16384"},
		{"no binary", func(c *scale.ShardsConfig) { c.Binary = "" }, "Binary must name the executable"},
		{"TTL too short", func(c *scale.ShardsConfig) { c.TTL = time.Second }, "TTL must be whole seconds and at least"},
		{"no rest", func(c *scale.ShardsConfig) { c.Rest = 0 }, "Rest must be positive"},
		{"negative settle", func(c *scale.ShardsConfig) { c.Settle = -time.Second }, "Settle must not be negative"},
		{"rest below a renewal", func(c *scale.ShardsConfig) { c.Rest = time.Second }, "Rest must be at least TTL/3"},
		{"more members than descriptors", func(c *scale.ShardsConfig) { c.Members = 10_000_000 }, "under the file-descriptor limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallShards()
			tc.edit(&cfg)
			_, err := scale.Shards(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Shards(%+v) = %v, want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}

// TestColdStart: member processes of a group started at once reach every
// shard owned and the balance, each figure timed and the moves counted
// from etcd's history, with no double ownership and nothing left in etcd.
func TestColdStart(t *testing.T) {
	cfg := scale.ColdConfig{Binary: os.Args[0], Members: 4, Shards: 64, TTL: 5 * time.Second,
		Target: time.Minute, Wait: time.Minute, Deadline: 3 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := scale.Cold(ctx, cfg, &progress)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if res.OwnedSeconds <= 0 || res.BalancedSeconds < res.OwnedSeconds || res.JoinedSeconds <= 0 {
		t.Errorf("joined %.2f s, owned %.2f s, balanced %.2f s: want each timed, balanced last", res.JoinedSeconds, res.OwnedSeconds, res.BalancedSeconds)
	}
	if res.Joins < cfg.Members || res.Writes.ShardPuts < cfg.Shards || res.Revisions <= 0 || res.HistoryEvents < cfg.Shards {
		t.Errorf("joins %d, writes %+v, revisions %d, history events %d: want at least a join per member and a put per shard", res.Joins, res.Writes, res.Revisions, res.HistoryEvents)
	}
	if res.DoubleHistory != 0 || res.DoubleFenced != 0 || res.ChildErrors != 0 || res.KeysLeft != 0 {
		t.Errorf("double ownership %d (history) %d (fenced), %d child errors, %d keys left; want none",
			res.DoubleHistory, res.DoubleFenced, res.ChildErrors, res.KeysLeft)
	}
	if res.FencedWrites < 2*cfg.Shards {
		t.Errorf("%d fenced writes, want at least an enter and an exit per shard (%d)", res.FencedWrites, 2*cfg.Shards)
	}
}
