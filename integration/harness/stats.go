package harness

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Summary is one measure over several runs: the median run, the lowest
// and the highest, and every run's value in order.
type Summary struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// Summarize is runs' median, lowest and highest.
func Summarize(runs []float64) Summary {
	if len(runs) == 0 {
		return Summary{}
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	return Summary{Median: median(s), Min: s[0], Max: s[len(s)-1], Runs: runs}
}

// String is "median [min–max]", or the median alone for one run.
func (s Summary) String() string {
	if len(s.Runs) < 2 {
		return fmt.Sprintf("%.4g", s.Median)
	}
	return fmt.Sprintf("%.4g [%.4g–%.4g]", s.Median, s.Min, s.Max)
}

// median of sorted values; the mean of the middle two for an even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of values
// (milliseconds or durations alike); zero for none.
func Percentile[T cmp.Ordered](values []T, p float64) T {
	var zero T
	if len(values) == 0 {
		return zero
	}
	s := slices.Clone(values)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}

// Mean is the arithmetic mean of values; zero for none.
func Mean[T ~int64 | ~float64](values []T) T {
	if len(values) == 0 {
		return 0
	}
	var sum T
	for _, v := range values {
		sum += v
	}
	return sum / T(len(values))
}

// Ms is d in milliseconds, the unit of the reports.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MsAll is every duration of ds in milliseconds.
func MsAll(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = Ms(d)
	}
	return out
}
