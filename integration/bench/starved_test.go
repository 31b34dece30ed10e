package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// A measure of time whose runs include a starved one is not judged, and
// the report says so at its top and marks the row; a count (heap per
// lock) is judged whatever the machine did.
func TestAStarvedRunsTimingsAreNotJudged(t *testing.T) {
	sum := func(v float64) harness.Summary { return harness.Summarize([]float64{v}) }
	rep := &Report{Config: Config{}.Defaults(), Runs: 4, StarvedRuns: 1,
		Starvation: harness.Starvation{Span: time.Minute, Ticks: 6000, Stalls: 3, Lost: 2 * time.Second, Max: 900 * time.Millisecond},
		Measures: []Measure{
			{Workload: "contend", Metric: "handoff p99 ms", Baton: sum(40), Raw: sum(50), Starved: 1, Runs: 2},
			{Workload: "held", Metric: "heap bytes/lock", Baton: sum(900), Raw: sum(2000), Starved: 1, Runs: 2},
			{Workload: "graceful", Metric: "failover p99 ms", Baton: sum(40), Raw: sum(50), Runs: 2},
		}}
	for i := range rep.Measures {
		judge(rep, &rep.Measures[i])
	}
	if m := rep.Measures[0]; m.Met != nil || !strings.Contains(m.Target, "not judged (starved: 1 of 2 runs)") {
		t.Errorf("a starved timing judged: met %v, target %q", m.Met, m.Target)
	}
	if m := rep.Measures[1]; m.Met == nil || !*m.Met {
		t.Errorf("heap per lock not judged on a starved run: %+v", m)
	}
	if m := rep.Measures[2]; m.Met == nil || *m.Met {
		t.Errorf("a timing with no starved run not judged (or met at 40 ms): %+v", m)
	}
	var out strings.Builder
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"STARVED: baton vs raw", "STARVED: 1 of 4 runs", "handoff p99 ms *", "not judged (starved: 1 of 2 runs)", "MISSED: baton ≤ 5 ms"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "heap bytes/lock *") {
		t.Errorf("a count marked as a starved timing:\n%s", s)
	}
}
