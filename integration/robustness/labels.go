package robustness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// Every process of the run records its primitives' metrics on Registerers
// of its own — this one two: the lanes' (workers, observers, guards) and
// the traffic kinds', whose names open and close all the time; each holder
// child one — whose name label limit (session.WithMetricLabelLimit, and
// fencing's for the resource label) is far below the run's names, so the
// collapse into "(other)" happens under the traffic. The metric-labels
// check judges the samples each Registerer's process takes of it.

// DefaultMetricLabelLimit is a run's limit unless Config says otherwise:
// below the 26 labels of this process's names and the 4 a child uses.
const DefaultMetricLabelLimit = 3

// observersLabel is the observers' WithMetricLabel: a caller's label, kept
// and not counted, so the places go to the traffic's names (observers
// stay open for the whole run, and would hold them).
const observersLabel = "observers"

// MetricSample is what one process's Registerer exported at one moment:
// the values of the name and resource labels ("(other)" aside, in Other),
// the collapsed counter by its label, and the number of series.
type MetricSample struct {
	Process   string // "main", "main.kinds", or a child's client ("c0")
	At        int64
	Names     []string           `json:",omitempty"`
	Resources []string           `json:",omitempty"`
	Other     map[string]bool    `json:",omitempty"` // by label: name, resource
	Collapsed map[string]float64 `json:",omitempty"` // baton_metric_labels_collapsed_total by label
	Series    int
}

// metricOpts are the options that put a primitive's metrics on reg with
// limit: session-wide, so given to a session, or to a primitive that makes
// its own.
func metricOpts(reg prometheus.Registerer, limit int) []mutex.Option {
	return []mutex.Option{session.WithRegisterer(reg), session.WithMetricLabelLimit(limit)}
}

// guardOpts are metricOpts for a fencing guard.
func guardOpts(reg prometheus.Registerer, limit int) []fencing.Option {
	return []fencing.Option{fencing.WithRegisterer(reg), fencing.WithMetricLabelLimit(limit)}
}

// sampleMetrics gathers reg.
func sampleMetrics(reg *prometheus.Registry, process string) MetricSample {
	s := MetricSample{Process: process, At: now(), Other: map[string]bool{}, Collapsed: map[string]float64{}}
	mfs, err := reg.Gather()
	if err != nil {
		return s
	}
	seen := map[string]map[string]bool{"name": {}, "resource": {}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				s.Series += len(m.GetHistogram().GetBucket()) + 3
			} else {
				s.Series++
			}
			for _, lp := range m.GetLabel() {
				if mf.GetName() == "baton_metric_labels_collapsed_total" {
					s.Collapsed[lp.GetValue()] = m.GetCounter().GetValue()
					continue
				}
				if values := seen[lp.GetName()]; values != nil {
					values[lp.GetValue()] = true
				}
			}
		}
	}
	for label, values := range seen {
		for v := range values {
			if v == session.OtherMetricLabel {
				s.Other[label] = true
				continue
			}
			if label == "name" {
				s.Names = append(s.Names, v)
			} else {
				s.Resources = append(s.Resources, v)
			}
		}
	}
	slices.Sort(s.Names)
	slices.Sort(s.Resources)
	return s
}

// sampleLoop samples this process's Registerer every period until ctx
// ends.
func (r *runner) sampleLoop(ctx context.Context) {
	const period = 250 * time.Millisecond
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sampleAll()
		}
	}
}

// sampleAll samples this process's Registerers: the lanes' ("main") and
// the traffic kinds' ("main.kinds"), whose names open and close often.
func (r *runner) sampleAll() {
	r.h.metrics(sampleMetrics(r.reg, "main"))
	r.h.metrics(sampleMetrics(r.kindsReg, "main.kinds"))
}

// checkMetricLabels judges each process's samples against its limit: a
// Registerer gives its own label to at most limit names (and resources),
// each keeping its place for the Registerer's life, so the values seen
// over the whole run, explicit labels aside, are at most the limit; and
// once "(other)" shows, its collapse was counted. The limit bounds the series too: the report shows
// the most a process exported.
func checkMetricLabels(h *History, rep *Report) {
	if h.MetricLabelLimit == 0 {
		return // a history recorded without Registerers
	}
	rep.Histories++
	byProcess := map[string][]MetricSample{}
	for _, s := range h.Metrics {
		byProcess[s.Process] = append(byProcess[s.Process], s)
	}
	explicit := map[string]bool{}
	for _, l := range h.ExplicitLabels {
		explicit[l] = true
	}
	for _, p := range sortedKeys(byProcess) {
		samples := byProcess[p]
		slices.SortFunc(samples, func(a, b MetricSample) int { return int(a.At - b.At) })
		for _, label := range []string{"name", "resource"} {
			union := map[string]bool{}
			over, otherAt := false, int64(0)
			counted := 0.0
			for _, s := range samples {
				rep.judged("metric-labels")
				values := s.Names
				if label == "resource" {
					values = s.Resources
				}
				for _, v := range values {
					if !explicit[v] || label != "name" {
						union[v] = true
					}
				}
				if len(union) > h.MetricLabelLimit && !over {
					over = true
					rep.Violations = append(rep.Violations, Violation{Check: "metric-labels",
						Msg: fmt.Sprintf("process %s: its Registerer carried %d %s label values by %s (%s), more than its limit %d: a value past the limit was given a place",
							p, len(union), label, since(h.Start, s.At), strings.Join(sorted(union), ", "), h.MetricLabelLimit),
						At: time.Duration(s.At - h.Start)})
				}
				if s.Other[label] && otherAt == 0 {
					otherAt = s.At
				}
				counted = max(counted, s.Collapsed[label])
			}
			if otherAt != 0 && counted == 0 {
				rep.Violations = append(rep.Violations, Violation{Check: "metric-labels",
					Msg: fmt.Sprintf("process %s: %s=%q exported from %s on, but baton_metric_labels_collapsed_total{label=%q} stayed 0 in all %d samples: a collapse was not counted",
						p, label, session.OtherMetricLabel, since(h.Start, otherAt), label, len(samples)),
					At: time.Duration(otherAt - h.Start)})
			}
		}
	}
}

// labelFigures sums up the samples of each process for the report.
func labelFigures(h *History) []string {
	type fig struct {
		samples, series, other int
		names, resources       map[string]bool
		collapsed              map[string]float64
	}
	figs := map[string]*fig{}
	for _, s := range h.Metrics {
		f := figs[s.Process]
		if f == nil {
			f = &fig{names: map[string]bool{}, resources: map[string]bool{}, collapsed: map[string]float64{}}
			figs[s.Process] = f
		}
		f.samples++
		f.series = max(f.series, s.Series)
		for _, v := range s.Names {
			if !slices.Contains(h.ExplicitLabels, v) {
				f.names[v] = true
			}
		}
		for _, v := range s.Resources {
			f.resources[v] = true
		}
		if s.Other["name"] {
			f.other++
		}
		for k, v := range s.Collapsed {
			f.collapsed[k] = max(f.collapsed[k], v)
		}
	}
	var out []string
	for _, p := range sortedKeys(figs) {
		f := figs[p]
		out = append(out, fmt.Sprintf("%-10s %d samples: %d default name and %d resource values in all, at most %d series at once; (other) in %d samples; collapsed: %v names, %v resources",
			p, f.samples, len(f.names), len(f.resources), f.series, f.other, f.collapsed["name"], f.collapsed["resource"]))
	}
	return out
}
