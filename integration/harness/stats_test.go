package harness

import (
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		p    float64
		want float64
	}{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {11, 2}, {1, 1}} {
		if got := Percentile(v, tt.p); got != tt.want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	ds := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	if got := Percentile(ds, 50); got != 2*time.Millisecond {
		t.Errorf("Percentile of durations, p50 = %v, want 2ms", got)
	}
	if Percentile([]float64(nil), 50) != 0 || Percentile([]time.Duration(nil), 99) != 0 {
		t.Error("Percentile of nothing is not zero")
	}
	if v[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
}

func TestSummarizeAndMean(t *testing.T) {
	s := Summarize([]float64{3, 1, 2, 10})
	if s.Median != 2.5 || s.Min != 1 || s.Max != 10 || len(s.Runs) != 4 || s.Runs[0] != 3 {
		t.Errorf("Summarize = %+v", s)
	}
	if got := s.String(); got != "2.5 [1–10]" {
		t.Errorf("String = %q", got)
	}
	if got := Mean([]time.Duration{time.Millisecond, 3 * time.Millisecond}); got != 2*time.Millisecond {
		t.Errorf("Mean = %v, want 2ms", got)
	}
	if z := Summarize(nil); Mean([]float64(nil)) != 0 || z.Median != 0 || z.Runs != nil {
		t.Error("the summary of nothing is not zero")
	}
}
