package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
)

// TestClustersEveryRowMeasured runs the router over 1 and 2 clusters
// briefly: every row has acquisitions and a Put floor, the table shows
// them, and no key is left on any cluster. The rates themselves are the
// harness's figures, not asserted.
func TestClustersEveryRowMeasured(t *testing.T) {
	cfg := scale.ClustersConfig{Counts: []int{1, 2}, Workers: 2, Window: 300 * time.Millisecond, Runs: 1, TTL: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := scale.Clusters(ctx, cfg, &progress)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if len(res.Rows) != len(cfg.Counts) {
		t.Fatalf("%d rows, want %d", len(res.Rows), len(cfg.Counts))
	}
	for i, row := range res.Rows {
		if row.Clusters != cfg.Counts[i] || row.Acquisitions.Median <= 0 || row.Puts.Median <= 0 || row.WritesPerAcquisition < 1 || row.Limit == "" {
			t.Errorf("row %d: %+v: want acquisitions, a Put floor, writes per acquisition and a limit", i, row)
		}
	}
	table := res.Table()
	t.Log("\n" + table)
	if got := strings.Count(table, "\n"); got != len(cfg.Counts)+2 {
		t.Errorf("table has %d lines, want a header, %d rows and a note:\n%s", got, len(cfg.Counts), table)
	}
	if res.KeysLeft != 0 {
		t.Errorf("%d keys left behind", res.KeysLeft)
	}
}

// TestClustersRefusesBadConfig: every bad size is refused before any
// member starts, with the field and its bound named.
func TestClustersRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*scale.ClustersConfig)
		want string
	}{
		{"no counts", func(c *scale.ClustersConfig) { c.Counts = nil }, "Counts must list at least one"},
		{"zero clusters", func(c *scale.ClustersConfig) { c.Counts = []int{1, 0} }, "Counts[1] must be in [1, 16]"},
		{"too many clusters", func(c *scale.ClustersConfig) { c.Counts = []int{17} }, "Counts[0] must be in [1, 16]"},
		{"negative workers", func(c *scale.ClustersConfig) { c.Workers = -1 }, "Workers must be at least 1"},
		{"no runs", func(c *scale.ClustersConfig) { c.Runs = 0 }, "Runs must be at least 1"},
		{"short window", func(c *scale.ClustersConfig) { c.Window = time.Millisecond }, "Window must be at least"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := scale.DefaultClustersConfig()
			tc.edit(&cfg)
			_, err := scale.Clusters(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Clusters(%+v) = %v, want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}
