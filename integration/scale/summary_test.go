package scale_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/scale"
)

// The summary line has exactly the format, and says "skipped" for
// a phase that did not run.
func TestSummaryLineFormat(t *testing.T) {
	held := &scale.HeldResult{Locks: 100000, Small: 1000, GoroutinesPerLock: 0.0001, AcquireRatio: 0.93,
		HeapPerLock: scale.Spread{Median: 992}, KeepAlivesPerTTLSmall: scale.Spread{Median: 3}, KeepAlivesPerTTL: scale.Spread{Median: 3}}
	s := scale.Summary{Held: 100000, HeldSmall: 1000, Waiters: 10000, HeldResult: held,
		WaitersResults: []scale.WaitersResult{
			{Impl: "baton", Waiters: 8, HandoffP99: 2 * time.Millisecond},
			{Impl: "baton", Waiters: 10000, HandoffP99: 3 * time.Millisecond, RequestsPerHandoff: 3, EventsPerHandoff: 1},
		},
		StormRan: true, StormOK: true, StormSeconds: 41.25, ProcessesRan: true, ProcessesOK: true, Processes: 50, ProcessLocks: 2000,
		FleetRan: true, Fleet: &scale.FleetResult{Runs: []scale.ProcessesResult{
			{Impl: "baton", Processes: 50, Sessions: 1, EventsPerAcquisition: 1.5}, {Impl: "raw", Processes: 50, Sessions: 1, EventsPerAcquisition: 0.9},
			{Impl: "raw", Processes: 50, Sessions: 10, EventsPerAcquisition: 1.1}, {Impl: "baton", Processes: 50, Sessions: 10, EventsPerAcquisition: 1.75},
		}}}
	want := "scale: held 100000 heap 992 B/lock goroutines/lock 0.0001 keepalives/ttl 3@1000 3@100000 acquire 0.93x raw; waiters 10000 requests/handoff 3.00 events/handoff 1.00 p99 1.50x; storm ok 41.2s; processes 50x2000 ok; fleet events/acquisition 50 sessions 1.50 (raw 0.90) 500 sessions 1.75 (raw 1.10)"
	if got := scale.Summarize(s); got != want {
		t.Errorf("summary\n got %s\nwant %s", got, want)
	}
	format := regexp.MustCompile(`^scale: held \d+ heap [0-9.]+ B/lock goroutines/lock [0-9.e-]+ keepalives/ttl [0-9.]+@\d+ [0-9.]+@\d+ acquire [0-9.]+x raw; waiters \d+ requests/handoff [0-9.]+ events/handoff [0-9.]+ p99 [0-9.]+x; storm (ok|FAIL) [0-9.]+s; processes \d+x\d+ (ok|FAIL); fleet events/acquisition( \d+ sessions [0-9.]+ \(raw [0-9.-]+\))+$`)
	if !format.MatchString(scale.Summarize(s)) {
		t.Errorf("summary %q does not match the issue's format", scale.Summarize(s))
	}
	if got, want := scale.Summarize(scale.Summary{Held: 5, Waiters: 7}), "scale: held 5 skipped; waiters 7 skipped; storm skipped; processes skipped; fleet skipped"; got != want {
		t.Errorf("summary of nothing run\n got %s\nwant %s", got, want)
	}
}
