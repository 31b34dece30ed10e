package mutex_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// seriesValue finds the series of family name whose labels include want
// in reg: a counter's or gauge's value, a histogram's sample count.
func seriesValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// Two open Mutexes whose metrics share a name label (WithMetricLabel, as
// the docs recommend for unbounded names, or the same lock name) share
// their series: closing one must leave the other's series, with every
// count so far, until the last of them is closed.
func TestCloseKeepsSeriesSharedWithAnOpenMutex(t *testing.T) {
	for _, tc := range []struct {
		name         string
		nameA, nameB string
		label        string
		opts         []mutex.Option
	}{
		{name: "shared metric label", nameA: "label-a", nameB: "label-b", label: "jobs", opts: []mutex.Option{mutex.WithMetricLabel("jobs")}},
		{name: "same name", nameA: "same-name", nameB: "same-name", label: "same-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := client(t)
			ctx := etcdtest.Context(t, 30*time.Second)
			reg := prometheus.NewRegistry()
			opts := append([]mutex.Option{mutex.WithNamespace("mlabel"), mutex.WithRegisterer(reg)}, tc.opts...)
			a := newMutex(t, cli, tc.nameA, opts...)
			b := newMutex(t, cli, tc.nameB, opts...)
			cycle := func(m *mutex.Mutex) {
				t.Helper()
				l, err := m.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			acquired := map[string]string{"namespace": "mlabel", "name": tc.label, "result": "acquired"}
			held := map[string]string{"namespace": "mlabel", "name": tc.label}
			check := func(when string, want float64) {
				t.Helper()
				var bad []string
				if v, ok := seriesValue(t, reg, "baton_lock_acquire_total", acquired); !ok || v != want {
					bad = append(bad, fmt.Sprintf("baton_lock_acquire_total%s = %v (present %v)", fmtLabels(acquired), v, ok))
				}
				if v, ok := seriesValue(t, reg, "baton_lock_hold_duration_seconds", held); !ok || v != want {
					bad = append(bad, fmt.Sprintf("baton_lock_hold_duration_seconds%s sample count = %v (present %v)", fmtLabels(held), v, ok))
				}
				if len(bad) > 0 {
					t.Fatalf("%s: %s; want %v each", when, strings.Join(bad, ", "), want)
				}
			}
			cycle(a)
			cycle(b)
			check("both open", 2)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			check("after closing one of two Mutexes sharing the label", 2)
			cycle(b)
			check("after the open one locked again", 3)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if v, ok := seriesValue(t, reg, "baton_lock_acquire_total", acquired); ok {
				t.Fatalf("after closing both: baton_lock_acquire_total%s = %v, want the series deleted", fmtLabels(acquired), v)
			}
		})
	}
}

// fmtLabels formats labels as Prometheus does: {k="v",...}, sorted.
func fmtLabels(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ",") + "}"
}
