package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/metrics"
)

func spanContext(sampled bool) trace.SpanContext {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		SpanID:     trace.SpanID{0xb7, 0xad, 1, 2, 3, 4, 5, 6},
		TraceFlags: flags,
	})
}

// exemplars returns the exemplars of every bucket of the histogram name.
func exemplars(t *testing.T, reg *prometheus.Registry, name string) []*dto.Exemplar {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Exemplar
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					out = append(out, e)
				}
			}
		}
	}
	return out
}

func TestHistogramsCarryTheSampledTraceAsExemplar(t *testing.T) {
	for _, tc := range []struct {
		name    string
		observe func(m *metrics.Metrics, sc trace.SpanContext)
	}{
		{"baton_lock_acquire_duration_seconds", func(m *metrics.Metrics, sc trace.SpanContext) {
			m.ObserveAcquireTraced("ns", "lock", "acquired", 40*time.Second, sc)
		}},
		{"baton_lock_hold_duration_seconds", func(m *metrics.Metrics, sc trace.SpanContext) {
			m.HoldEndedTraced("ns", "lock", 3*time.Second, "key_deleted", sc)
		}},
		{"baton_election_campaign_duration_seconds", func(m *metrics.Metrics, sc trace.SpanContext) {
			m.ObserveCampaignTraced("ns", "leader", "acquired", time.Second, sc)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			tc.observe(m, spanContext(false))
			tc.observe(m, trace.SpanContext{})
			if ex := exemplars(t, reg, tc.name); len(ex) != 0 {
				t.Fatalf("exemplars %v for unsampled traces", ex)
			}
			tc.observe(m, spanContext(true))
			ex := exemplars(t, reg, tc.name)
			if len(ex) != 1 {
				t.Fatalf("%d exemplars, want 1", len(ex))
			}
			labels := map[string]string{}
			for _, l := range ex[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["trace_id"] != "0af765190102030405060708090a0b0c" || labels["span_id"] != "b7ad010203040506" || len(labels) != 2 {
				t.Fatalf("exemplar labels %v", labels)
			}
		})
	}
	var nilMetrics *metrics.Metrics // a process without metrics
	nilMetrics.ObserveAcquireTraced("ns", "lock", "acquired", time.Second, spanContext(true))
	nilMetrics.HoldEndedTraced("ns", "lock", time.Second, "", spanContext(true))
	nilMetrics.ObserveCampaignTraced("ns", "lock", "acquired", time.Second, spanContext(true))
}
