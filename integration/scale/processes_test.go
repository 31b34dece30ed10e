package scale_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
)

// smallProcesses is a processes phase CI can afford: this test binary run
// as 4 children (TestMain dispatches "child"), 40 acquisitions each over
// 10 shared names.
func smallProcesses() scale.ProcessesConfig {
	return scale.ProcessesConfig{Binary: os.Args[0], Processes: 4, Locks: 40, Names: 10, Workers: 2,
		TTL: 5 * time.Second, Deadline: 2 * time.Minute}
}

// TestProcessesNoDoubleHolder runs holder processes that contend for the
// same names: every acquisition reaches the parent's guard, no two holders
// of a name overlap, no token is rejected, locks pass between processes,
// and nothing is left in etcd.
func TestProcessesNoDoubleHolder(t *testing.T) {
	cfg := smallProcesses()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := scale.Processes(ctx, cfg, &progress)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	if want := cfg.Processes * cfg.Locks; res.Acquisitions != want || res.Writes != 2*want {
		t.Errorf("%d acquisitions and %d writes reached the guard, want %d and %d", res.Acquisitions, res.Writes, want, 2*want)
	}
	if res.Overlaps != 0 || res.Rejected != 0 || res.ChildErrors != 0 {
		t.Errorf("%d overlapping holders, %d stale writes, %d child errors; want none", res.Overlaps, res.Rejected, res.ChildErrors)
	}
	if res.Handoffs == 0 {
		t.Error("no lock passed between processes")
	}
	if res.KeysLeft != 0 {
		t.Errorf("%d keys left behind", res.KeysLeft)
	}
}

// TestProcessesRefusesBadConfig: every bad size is refused before any
// process starts, with the field and its bound named.
func TestProcessesRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*scale.ProcessesConfig)
		want string
	}{
		{"no processes", func(c *scale.ProcessesConfig) { c.Processes = 0 }, "Processes must be at least 1"},
		{"negative locks", func(c *scale.ProcessesConfig) { c.Locks = -5 }, "Locks must be at least 1"},
		{"no workers", func(c *scale.ProcessesConfig) { c.Workers = 0 }, "Workers must be at least 1"},
		{"no binary", func(c *scale.ProcessesConfig) { c.Binary = "" }, "Binary must name the executable"},
		{"missing binary", func(c *scale.ProcessesConfig) { c.Binary = "/nonexistent/baton-scale" }, "Binary"},
		{"more processes than descriptors", func(c *scale.ProcessesConfig) { c.Processes = 10_000_000 }, "under the file-descriptor limit"},
		{"TTL too short", func(c *scale.ProcessesConfig) { c.TTL = time.Second }, "TTL must be whole seconds and at least"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallProcesses()
			tc.edit(&cfg)
			_, err := scale.Processes(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Processes(%+v) = %v, want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}
