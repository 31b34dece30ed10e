// Package metrics defines baton's Prometheus metrics and registers them on
// the Registerer the caller hands in, never on the global one. Several
// mutexes and elections may share one Registerer: a collector that is
// already registered is reused.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds every collector of a mutex or election.
type Metrics struct {
	AcquireDuration   *prometheus.HistogramVec
	AcquireTotal      *prometheus.CounterVec
	HoldDuration      *prometheus.HistogramVec
	LostTotal         *prometheus.CounterVec
	RenewalFailures   *prometheus.CounterVec
	IsLeader          *prometheus.GaugeVec
	Transitions       *prometheus.CounterVec
	CampaignDuration  *prometheus.HistogramVec
	ElectionLostTotal *prometheus.CounterVec
	FencingRejections *prometheus.CounterVec
}

// Label names.
var (
	nameLabels   = []string{"namespace", "name"}
	resultLabels = []string{"namespace", "name", "result"}
	reasonLabels = []string{"namespace", "name", "reason"}
)

// Buckets for waits and holds: 1 ms to about 20 minutes.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 11)

// New builds the collectors and registers them on reg. A nil reg returns
// a nil *Metrics, whose methods do nothing: a process that does not export
// metrics pays nothing per lock for them.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &Metrics{
		AcquireDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lock_acquire_duration_seconds", Help: "Time from Lock or TryLock to its return, by result.",
			Buckets: durationBuckets,
		}, resultLabels),
		AcquireTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_lock_acquire_total", Help: "Lock and TryLock calls by result: acquired, locked, canceled, error.",
		}, resultLabels),
		HoldDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lock_hold_duration_seconds", Help: "Time a lock was held, from acquisition to release or loss.",
			Buckets: durationBuckets,
		}, nameLabels),
		LostTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_lock_lost_total", Help: "Locks lost while held, by reason.",
		}, reasonLabels),
		RenewalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_session_renewal_failures_total", Help: "Lease renewal attempts that failed.",
		}, nameLabels),
		IsLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_election_is_leader", Help: "1 while this process leads the election.",
		}, nameLabels),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_election_transitions_total", Help: "Times this process became leader or stopped leading.",
		}, nameLabels),
		CampaignDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_election_campaign_duration_seconds", Help: "Time from Campaign to its return, by result.",
			Buckets: durationBuckets,
		}, resultLabels),
		ElectionLostTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_election_lost_total", Help: "Terms lost while leading, by reason.",
		}, reasonLabels),
		FencingRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_fencing_rejections_total", Help: "Writes rejected for carrying a stale fencing token.",
		}, []string{"resource"}),
	}
	var err error
	m.AcquireDuration = register(reg, m.AcquireDuration, &err)
	m.AcquireTotal = register(reg, m.AcquireTotal, &err)
	m.HoldDuration = register(reg, m.HoldDuration, &err)
	m.LostTotal = register(reg, m.LostTotal, &err)
	m.RenewalFailures = register(reg, m.RenewalFailures, &err)
	m.IsLeader = register(reg, m.IsLeader, &err)
	m.Transitions = register(reg, m.Transitions, &err)
	m.CampaignDuration = register(reg, m.CampaignDuration, &err)
	m.ElectionLostTotal = register(reg, m.ElectionLostTotal, &err)
	m.FencingRejections = register(reg, m.FencingRejections, &err)
	return m, err
}

// register registers c, or returns the collector already registered under
// the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}

// ObserveAcquire records one Lock or TryLock call.
func (m *Metrics) ObserveAcquire(ns, name, result string, d time.Duration) {
	m.ObserveAcquireTraced(ns, name, result, d, trace.SpanContext{})
}

// ObserveAcquireTraced records one Lock or TryLock call whose wait span is
// sc: a sampled one is the observation's exemplar.
func (m *Metrics) ObserveAcquireTraced(ns, name, result string, d time.Duration, sc trace.SpanContext) {
	if m == nil {
		return
	}
	observe(m.AcquireDuration.WithLabelValues(ns, name, result), d.Seconds(), sc)
	m.AcquireTotal.WithLabelValues(ns, name, result).Inc()
}

// HoldEnded records the end of a hold; reason is empty for a release.
func (m *Metrics) HoldEnded(ns, name string, held time.Duration, lostReason string) {
	m.HoldEndedTraced(ns, name, held, lostReason, trace.SpanContext{})
}

// HoldEndedTraced records the end of a hold whose span is sc: a sampled
// one is the observation's exemplar.
func (m *Metrics) HoldEndedTraced(ns, name string, held time.Duration, lostReason string, sc trace.SpanContext) {
	if m == nil {
		return
	}
	observe(m.HoldDuration.WithLabelValues(ns, name), held.Seconds(), sc)
	if lostReason != "" {
		m.LostTotal.WithLabelValues(ns, name, lostReason).Inc()
	}
}

// RenewalFailed returns the function that counts a failed renewal.
func (m *Metrics) RenewalFailed(ns, name string) func() {
	if m == nil {
		return nil
	}
	return m.RenewalFailures.WithLabelValues(ns, name).Inc
}

// ObserveCampaign records one Campaign call.
func (m *Metrics) ObserveCampaign(ns, name, result string, d time.Duration) {
	m.ObserveCampaignTraced(ns, name, result, d, trace.SpanContext{})
}

// ObserveCampaignTraced records one Campaign call whose wait span is sc: a
// sampled one is the observation's exemplar.
func (m *Metrics) ObserveCampaignTraced(ns, name, result string, d time.Duration, sc trace.SpanContext) {
	if m == nil {
		return
	}
	observe(m.CampaignDuration.WithLabelValues(ns, name, result), d.Seconds(), sc)
}

// Exemplar label names, as Grafana's Prometheus data source expects them
// by default for a link to the trace.
const (
	ExemplarTraceID = "trace_id"
	ExemplarSpanID  = "span_id"
)

// observe records v on o, with sc as its exemplar when sc is sampled: an
// unsampled trace is stored nowhere, so it would be a dead link. Exemplars
// are exposed in the OpenMetrics format only.
func observe(o prometheus.Observer, v float64, sc trace.SpanContext) {
	if sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{ExemplarTraceID: sc.TraceID().String(), ExemplarSpanID: sc.SpanID().String()})
			return
		}
	}
	o.Observe(v)
}

// Leading records a transition into or out of leadership; lostReason is
// set when leadership was lost rather than resigned.
func (m *Metrics) Leading(ns, name string, leading bool, lostReason string) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	m.IsLeader.WithLabelValues(ns, name).Set(v)
	m.Transitions.WithLabelValues(ns, name).Inc()
	if lostReason != "" {
		m.ElectionLostTotal.WithLabelValues(ns, name, lostReason).Inc()
	}
}

// Rejected counts a stale token rejected for resource.
func (m *Metrics) Rejected(resource string) {
	if m == nil {
		return
	}
	m.FencingRejections.WithLabelValues(resource).Inc()
}

// Forget deletes every series of one lock or election (its namespace and
// name labels), so that closed ones do not accumulate.
func (m *Metrics) Forget(ns, name string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"namespace": ns, "name": name}
	m.AcquireDuration.DeletePartialMatch(labels)
	m.AcquireTotal.DeletePartialMatch(labels)
	m.HoldDuration.DeletePartialMatch(labels)
	m.LostTotal.DeletePartialMatch(labels)
	m.RenewalFailures.DeletePartialMatch(labels)
	m.IsLeader.DeletePartialMatch(labels)
	m.Transitions.DeletePartialMatch(labels)
	m.CampaignDuration.DeletePartialMatch(labels)
	m.ElectionLostTotal.DeletePartialMatch(labels)
}
