// Package metrics defines baton's Prometheus metrics and registers them on
// the Registerer the caller hands in, never on the global one. Several
// mutexes and elections may share one Registerer: a collector that is
// already registered is reused.
package metrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/planted"
)

// Metrics holds every collector of a mutex or election.
type Metrics struct {
	users             *users // who uses which series, shared through the Registerer
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
	Collapsed         *prometheus.CounterVec // labels.go
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
	c := collectors{reg: reg}
	m := &Metrics{
		users: register(reg, &users{n: map[[2]string]int{}, leading: map[[2]string]int{},
			names: map[[2]string]struct{}{}, resources: map[string]struct{}{}}, &c.err),
		AcquireDuration:   c.histogram("baton_lock_acquire_duration_seconds", "Time from Lock or TryLock to its return, by result.", durationBuckets, resultLabels),
		AcquireTotal:      c.counter("baton_lock_acquire_total", "Lock and TryLock calls by result: acquired, locked, canceled, error.", resultLabels),
		HoldDuration:      c.histogram("baton_lock_hold_duration_seconds", "Time a lock was held, from acquisition to release or loss.", durationBuckets, nameLabels),
		LostTotal:         c.counter("baton_lock_lost_total", "Locks lost while held, by reason.", reasonLabels),
		RenewalFailures:   c.counter("baton_session_renewal_failures_total", "Lease renewal attempts that failed.", nameLabels),
		IsLeader:          c.gauge("baton_election_is_leader", "1 while this process leads the election.", nameLabels),
		Transitions:       c.counter("baton_election_transitions_total", "Times this process became leader or stopped leading.", nameLabels),
		CampaignDuration:  c.histogram("baton_election_campaign_duration_seconds", "Time from Campaign to its return, by result.", durationBuckets, resultLabels),
		ElectionLostTotal: c.counter("baton_election_lost_total", "Terms lost while leading, by reason.", reasonLabels),
		FencingRejections: c.counter("baton_fencing_rejections_total", "Writes rejected for carrying a stale fencing token.", []string{"resource"}),
		Collapsed: c.counter("baton_metric_labels_collapsed_total",
			"Primitives opened (label=\"name\") and fencing rejections (label=\"resource\") recorded under the label value (other): the Registerer already carried its limit of values (WithMetricLabelLimit).",
			[]string{"label"}),
	}
	return m, c.err
}

// collectors builds collectors and registers them on reg (register),
// keeping the first error.
type collectors struct {
	reg prometheus.Registerer
	err error
}

func (c *collectors) counter(name, help string, labels []string) *prometheus.CounterVec {
	return register(c.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels), &c.err)
}

func (c *collectors) gauge(name, help string, labels []string) *prometheus.GaugeVec {
	return register(c.reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels), &c.err)
}

func (c *collectors) histogram(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
	return register(c.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels), &c.err)
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
// set when leadership was lost rather than resigned. The gauge is 1 while
// any term under the label leads in this process.
func (m *Metrics) Leading(ns, name string, leading bool, lostReason string) {
	if m == nil {
		return
	}
	k := [2]string{ns, name}
	m.users.mu.Lock()
	if leading {
		m.users.leading[k]++
	} else if m.users.leading[k]--; m.users.leading[k] <= 0 {
		delete(m.users.leading, k)
	}
	v := 0.0
	if m.users.leading[k] > 0 {
		v = 1
	}
	m.IsLeader.WithLabelValues(ns, name).Set(v)
	m.users.mu.Unlock()
	m.Transitions.WithLabelValues(ns, name).Inc()
	if lostReason != "" {
		m.ElectionLostTotal.WithLabelValues(ns, name, lostReason).Inc()
	}
}

// Rejected counts a stale token rejected for resource: under its own
// label if the Registerer carries it already or fewer than limit
// resources, else under Other, as Label does for names.
func (m *Metrics) Rejected(resource string, limit int) {
	if m == nil {
		return
	}
	m.FencingRejections.WithLabelValues(m.resource(resource, limit)).Inc()
}

// users counts the open primitives and the leading terms per namespace and
// name label, and holds the default label values given a place (Label).
// It is registered with the other collectors, so every Metrics built on
// one Registerer finds the same one, with no state in this package.
type users struct {
	mu        sync.Mutex
	n         map[[2]string]int // open primitives
	leading   map[[2]string]int // terms leading
	names     map[[2]string]struct{}
	resources map[string]struct{}
	warned    bool // the first collapse was reported
}

var usersDesc = prometheus.NewDesc("baton_internal_metric_users", "Never collected: identifies the users table.", nil, nil)

func (*users) Describe(ch chan<- *prometheus.Desc) { ch <- usersDesc }
func (*users) Collect(chan<- prometheus.Metric)    {}

// Use counts one more primitive recording under ns and name; the returned
// func ends that use, and the last one deletes the series.
func (m *Metrics) Use(ns, name string) (done func()) {
	if m == nil {
		return func() {}
	}
	k := [2]string{ns, name}
	m.users.mu.Lock()
	m.users.n[k]++
	m.users.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.users.mu.Lock()
			defer m.users.mu.Unlock()
			if m.users.n[k]--; m.users.n[k] > 0 {
				return
			}
			delete(m.users.n, k)
			if planted.On("o") {
				delete(m.users.names, k) // the place goes with the series
			}
			m.forget(ns, name)
		})
	}
}

// forget deletes every series of one namespace and name label.
func (m *Metrics) forget(ns, name string) {
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

// Kind is a primitive; an election's records a leader gauge and campaign
// durations.
type Kind uint8

// The primitives, and their names and nouns in errors and logs.
const (
	Mutex Kind = iota
	Election
	Semaphore
	RWMutex
)

var (
	KindNames = [...]string{"mutex", "election", "semaphore", "rwmutex"}
	nouns     = [...]string{"lock", "term", "permit", "lock"}
)

// Recorder records one primitive's acquisitions and holds in metrics and
// logs, the same way for every primitive.
type Recorder struct {
	Metrics                *Metrics
	Logger                 *zap.Logger
	Name, Namespace, Label string
	Kind                   Kind
}

// Acquired records one acquiring call by result ("acquired", "locked",
// "canceled", "error"); fields, called only to log, are the hold's; sc is
// the call's span, the exemplar when sampled.
func (r *Recorder) Acquired(result string, d time.Duration, fields func() []zap.Field, sc trace.SpanContext) {
	switch {
	case r.Kind == Election && result == "acquired":
		result = "leader"
		r.Logger.Info("became leader", r.Fields(fields()...)...)
	case result == "acquired" && r.Logger.Core().Enabled(zap.DebugLevel): // the fields cost even when dropped
		r.Logger.Debug(nouns[r.Kind]+" acquired", r.Fields(fields()...)...)
	}
	if r.Kind == Election {
		r.Metrics.ObserveCampaignTraced(r.Namespace, r.Label, result, d, sc)
	} else {
		r.Metrics.ObserveAcquireTraced(r.Namespace, r.Label, result, d, sc)
	}
}

// Started records a hold's start.
func (r *Recorder) Started() {
	if r.Kind == Election {
		r.Metrics.Leading(r.Namespace, r.Label, true, "")
	}
}

// Ended records a hold's end: a release when cause is errs.ErrReleased,
// else a loss with its reason; sc is the hold's span, the exemplar when
// sampled.
func (r *Recorder) Ended(cause error, held time.Duration, fields func() []zap.Field, sc trace.SpanContext) {
	reason := ""
	if !errors.Is(cause, errs.ErrReleased) {
		reason = errs.Reason(cause)
	}
	switch {
	case r.Kind == Election && reason == "":
		r.Metrics.Leading(r.Namespace, r.Label, false, "")
		r.Logger.Info("resigned", r.Fields(append(fields(), zap.Duration("led", held))...)...)
	case r.Kind == Election:
		r.Metrics.Leading(r.Namespace, r.Label, false, reason)
		r.Logger.Warn("leadership lost", r.Fields(append(fields(), zap.Duration("led", held), zap.Error(cause))...)...)
	case reason == "":
		r.Metrics.HoldEndedTraced(r.Namespace, r.Label, held, "", sc)
		if r.Logger.Core().Enabled(zap.DebugLevel) {
			r.Logger.Debug(nouns[r.Kind]+" released", r.Fields(fields()...)...)
		}
	default:
		r.Metrics.HoldEndedTraced(r.Namespace, r.Label, held, reason, sc)
		r.Logger.Warn(nouns[r.Kind]+" lost", r.Fields(append(fields(), zap.Error(cause))...)...)
	}
}

// Fields adds the name and namespace to a log line's fields; the logger is
// not cloned per primitive, which would cost every held lock.
func (r *Recorder) Fields(f ...zap.Field) []zap.Field {
	return append(f, zap.String("name", r.Name), zap.String("namespace", r.Namespace))
}
