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

// TestFleetComparesBatonAndRawOverSessions runs the fleet phase small: 3
// processes of 1 and of 2 sessions, baton and raw etcd concurrency, every
// run checked as the processes phase checks it, and the member's watch
// events per acquisition measured for each.
func TestFleetComparesBatonAndRawOverSessions(t *testing.T) {
	cfg := scale.FleetConfig{Binary: os.Args[0], Processes: 3, Sessions: []int{1, 2}, Locks: 30, Names: 10, Workers: 1,
		TTL: 5 * time.Second, Deadline: 2 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := scale.Fleet(ctx, cfg, &progress)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		t.Error(f)
	}
	t.Log("\n" + res.Table())
	for _, impl := range []string{"baton", "raw"} {
		for _, s := range cfg.Sessions {
			r, ok := res.Run(impl, s)
			if !ok {
				t.Fatalf("no run of %s with %d sessions per process", impl, s)
			}
			if want := cfg.Processes * cfg.Locks; r.Acquisitions != want || r.Overlaps != 0 || r.Rejected != 0 {
				t.Errorf("%s, %d sessions: %d acquisitions (want %d), %d overlaps, %d rejected", impl, s, r.Acquisitions, want, r.Overlaps, r.Rejected)
			}
			if r.EventsPerAcquisition <= 0 {
				t.Errorf("%s, %d sessions: %v watch events per acquisition: the member's counter was not read", impl, s, r.EventsPerAcquisition)
			}
		}
	}
}
