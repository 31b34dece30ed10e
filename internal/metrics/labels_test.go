package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/batonhq/baton/internal/metrics"
)

// exposition sums up what reg exports: its series as Prometheus stores
// them (a histogram's buckets, sum and count each one), the distinct
// values of each label, and the collapsed counter by its label.
type exposition struct {
	series    int
	values    map[string]map[string]bool // label name → values
	collapsed map[string]float64
}

func expose(t *testing.T, reg *prometheus.Registry) exposition {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e := exposition{values: map[string]map[string]bool{}, collapsed: map[string]float64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				e.series += len(m.GetHistogram().GetBucket()) + 3 // +Inf, _sum, _count
			default:
				e.series++
			}
			for _, lp := range m.GetLabel() {
				if e.values[lp.GetName()] == nil {
					e.values[lp.GetName()] = map[string]bool{}
				}
				e.values[lp.GetName()][lp.GetValue()] = true
				if mf.GetName() == "baton_metric_labels_collapsed_total" {
					e.collapsed[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return e
}

// record opens a primitive of namespace ns whose default label is def, as
// config does, and records an acquisition and a release under its label;
// it leaves the primitive open (its series stay).
func record(m *metrics.Metrics, ns, def string, limit int) string {
	label, _ := m.Label(ns, def, limit)
	m.Use(ns, label)
	m.ObserveAcquire(ns, label, "acquired", time.Millisecond)
	m.HoldEnded(ns, label, 10*time.Millisecond, "")
	return label
}

// A service that locks "order-<id>" must not export a series per order:
// 100,000 distinct names, each still open, leave at most the limit's
// worth of name labels, plus "(other)", and every name past the limit is
// counted once. The same for the resource label of fencing rejections.
func TestDefaultLabelsStayBoundedOver100000Names(t *testing.T) {
	const names = 100_000
	const limit = metrics.DefaultLabelLimit
	one := prometheus.NewRegistry()
	m1, err := metrics.New(one)
	if err != nil {
		t.Fatal(err)
	}
	record(m1, "orders", "order-0", limit)
	m1.Rejected("order-0", limit)
	perLabel := expose(t, one).series // one name's series and one resource's

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range names {
		name := fmt.Sprintf("order-%d", i)
		record(m, "orders", name, limit)
		m.Rejected(name, limit)
	}
	e := expose(t, reg)
	t.Logf("%d names: %d series exported (%d for one name), %d name values, %d resource values",
		names, e.series, perLabel, len(e.values["name"]), len(e.values["resource"]))
	if max := (limit + 1) * perLabel; e.series > max+2 { // + the collapsed counter's two
		t.Errorf("%d series for %d names, want at most %d: (limit %d + 1) × %d per name, and the collapsed counter's 2",
			e.series, names, max+2, limit, perLabel)
	}
	for _, label := range []string{"name", "resource"} {
		if n := len(e.values[label]); n != limit+1 {
			t.Errorf("%d values of label %s, want %d: the first %d names and %q", n, label, limit+1, limit, metrics.Other)
		}
		if !e.values[label][metrics.Other] || !e.values[label]["order-0"] || !e.values[label][fmt.Sprintf("order-%d", limit-1)] {
			t.Errorf("label %s lacks %q or the first names: %d values", label, metrics.Other, len(e.values[label]))
		}
		if got, want := e.collapsed[label], float64(names-limit); got != want {
			t.Errorf("baton_metric_labels_collapsed_total{label=%q} = %v, want %v (one per name past the limit)", label, got, want)
		}
	}
}

// A label keeps its place once given, used or not: a name whose series
// were deleted (its last primitive closed) gets its own again, and a new
// name past the limit does not take the place; so the values a Registerer
// ever carries stay at most the limit.
func TestLabelKeepsItsPlaceAfterItsSeriesAreDeleted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 2
	open := func(name string) (string, func()) {
		label, _ := m.Label("ns", name, limit)
		done := m.Use("ns", label)
		m.ObserveAcquire("ns", label, "acquired", time.Millisecond)
		return label, done
	}
	_, doneA := open("a")
	_, doneB := open("b")
	doneA()
	if v := expose(t, reg).values["name"]; v["a"] || !v["b"] {
		t.Fatalf("after a's last user closed: name values %v, want b only (a's series deleted)", v)
	}
	if l, _ := open("c"); l != metrics.Other {
		t.Fatalf("c after a's series were deleted: label %q, want %q (a keeps its place)", l, metrics.Other)
	}
	if l, _ := open("a"); l != "a" {
		t.Fatalf("a opened again: label %q, want its own", l)
	}
	doneB()
	if e := expose(t, reg); len(e.values["name"]) != 2 || e.collapsed["name"] != 1 {
		t.Fatalf("name values %v, collapsed %v: want a and %q, and c counted once", e.values["name"], e.collapsed, metrics.Other)
	}
}

func TestLabelLimitIsPerRegisterer(t *testing.T) {
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a1, _ := metrics.New(regA)
	a2, _ := metrics.New(regA) // another primitive on the same Registerer
	b, _ := metrics.New(regB)
	if l, _ := a1.Label("ns", "x", 1); l != "x" {
		t.Fatalf("first name on A: %q", l)
	}
	if l, _ := a2.Label("ns", "y", 1); l != metrics.Other {
		t.Fatalf("second name on A through another Metrics: %q, want %q: the limit is the Registerer's", l, metrics.Other)
	}
	if l, _ := a2.Label("ns", "x", 1); l != "x" {
		t.Fatalf("x on A through another Metrics: %q, want x: its place is the Registerer's", l)
	}
	if l, _ := b.Label("ns", "y", 1); l != "y" {
		t.Fatalf("first name on B: %q, want y: another Registerer has a table of its own", l)
	}
	// Each caller's limit applies to what it opens: a larger one admits
	// more, a smaller one does not take back what is there.
	if l, _ := a1.Label("ns", "z", 3); l != "z" {
		t.Fatalf("z with limit 3 on A carrying 1: %q, want z", l)
	}
	if l, _ := a1.Label("ns", "w", 2); l != metrics.Other {
		t.Fatalf("w with limit 2 on A carrying 2: %q, want %q", l, metrics.Other)
	}
	if l, _ := a1.Label("ns", "z", 1); l != "z" {
		t.Fatalf("z with limit 1: %q, want z: it has its place", l)
	}
}

// Places are counted over namespaces; each namespace has its own
// "(other)", and the first collapse is reported once per Registerer.
func TestCollapseIsPerNamespaceAndReportedOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := metrics.New(reg)
	if l, first := m.Label("ns1", "a", 1); l != "a" || first {
		t.Fatalf("a: %q %v", l, first)
	}
	if l, first := m.Label("ns2", "a", 1); l != metrics.Other || !first {
		t.Fatalf("a of another namespace: %q first %v, want %q and the first collapse", l, first, metrics.Other)
	}
	if l, first := m.Label("ns1", "b", 1); l != metrics.Other || first {
		t.Fatalf("b: %q first %v, want %q, not the first", l, first, metrics.Other)
	}
	if l, first := m.Label("ns1", metrics.Other, 1); l != metrics.Other || first {
		t.Fatalf("a primitive named %q: %q %v", metrics.Other, l, first)
	}
	var nilMetrics *metrics.Metrics // a process without metrics
	if l, first := nilMetrics.Label("ns", "c", 1); l != "c" || first {
		t.Fatalf("nil Metrics: %q %v", l, first)
	}
	nilMetrics.Rejected("r", 1)
}

func TestCheckLabelLimit(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string // empty: accepted
	}{
		{1, ""},
		{metrics.DefaultLabelLimit, ""},
		{metrics.MaxLabelLimit, ""},
		{0, "WithMetricLabelLimit(0): must be at least 1 and at most 10000"},
		{-1, "WithMetricLabelLimit(-1): must be at least 1 and at most 10000"},
		{metrics.MaxLabelLimit + 1, "WithMetricLabelLimit(10001): must be at least 1 and at most 10000"},
	} {
		err := metrics.CheckLabelLimit(tc.n)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckLabelLimit(%d) = %v, want nil", tc.n, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckLabelLimit(%d) = %v, want %q", tc.n, err, tc.want)
		}
	}
}
