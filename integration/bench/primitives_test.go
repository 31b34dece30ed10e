package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunPrimitivesSmall runs every primitives workload once, briefly, for
// both sides: the exclusion and limit checks of the contention workloads
// fail the run if either side lets too many in.
func TestRunPrimitivesSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every primitives workload: about 5 s")
	}
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := RunPrimitives(ctx, srv.Server, Config{Runs: 1, Duration: 300 * time.Millisecond, Contenders: 4}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	seen := map[string]bool{}
	for _, m := range rep.Measures {
		seen[m.Workload] = true
		if len(m.Baton.Runs) != 1 || len(m.Raw.Runs) != 1 || m.Baton.Median <= 0 || m.Raw.Median <= 0 {
			t.Errorf("%s %s: baton %v raw %v, want one positive run each", m.Workload, m.Metric, m.Baton.Runs, m.Raw.Runs)
		}
	}
	for _, w := range PrimitiveWorkloads() {
		if !seen[w] {
			t.Errorf("workload %s reported nothing", w)
		}
	}
	var out strings.Builder
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), PrimitivesCompared) {
		t.Errorf("report does not say what it compares:\n%s", out.String())
	}
}
