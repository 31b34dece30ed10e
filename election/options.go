package election

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/session"
)

// Option configures an Election. New validates all options together and rejects
// bad values with an error wrapping ErrInvalid that names the option and
// its bound. The options of package session, and a *session.Session
// itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = session.DefaultTTL, session.MinTTL, session.DefaultMaxTTL

// The options every primitive takes, one definition for all:
//
//   - WithTTL, WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger,
//     WithRegisterer, WithMetricLabelLimit and WithTracerProvider are
//     package session's, which documents them: the lease's TTL (default
//     15 s; it bounds how long a crashed holder keeps others waiting, not
//     how long one holds), its cap, the safety margin, the cap on keys
//     held, the logger, the Registerer and the bound on the name labels it
//     carries by default, and the OpenTelemetry provider of the spans of
//     every wait, hold and release (docs/telemetry.md). They are
//     session-wide: given with WithSession they must agree with the
//     session's.
//   - WithNamespace sets the first segment of every key (default "baton"):
//     1 to 64 bytes of letters, digits, '.', '_' and '-'. One namespace per
//     team or service makes RBAC one prefix grant.
//   - WithMetricLabel sets the value of the name label of the metrics
//     (default: its name, until the Registerer carries
//     WithMetricLabelLimit names; past them "(other)"). The leader gauge
//     of a shared label is 1 while any term under it lasts. Label
//     per-entity elections (one per tenant) with one value for the kind,
//     never the id: a given label is kept as it is and does not count
//     toward the limit. A label's series stay until the last primitive
//     using it is closed.
//
// Each is a function of its own below.

// WithTTL sets the lease's TTL (default DefaultTTL, at least MinTTL), as session.WithTTL.
func WithTTL(ttl time.Duration) Option { return session.WithTTL(ttl) }

// WithMaxTTL caps the TTL (default DefaultMaxTTL), as session.WithMaxTTL.
func WithMaxTTL(maxTTL time.Duration) Option { return session.WithMaxTTL(maxTTL) }

// WithSafetyMargin sets how long before the lease can expire a hold's Context ends, as session.WithSafetyMargin.
func WithSafetyMargin(d time.Duration) Option { return session.WithSafetyMargin(d) }

// WithMaxHeld caps the keys the session holds at once, as session.WithMaxHeld.
func WithMaxHeld(n int) Option { return session.WithMaxHeld(n) }

// WithLogger sets the logger (default: none), as session.WithLogger.
func WithLogger(l *zap.Logger) Option { return session.WithLogger(l) }

// WithRegisterer registers the metrics on reg (default: none), as session.WithRegisterer.
func WithRegisterer(reg prometheus.Registerer) Option { return session.WithRegisterer(reg) }

// WithMetricLabelLimit bounds the name labels the Registerer carries by
// default (default session.DefaultMetricLabelLimit): past n names, one
// without a WithMetricLabel records under "(other)". As
// session.WithMetricLabelLimit, which says how; session-wide.
func WithMetricLabelLimit(n int) Option { return session.WithMetricLabelLimit(n) }

// WithTracerProvider sets the OpenTelemetry provider of the spans, as session.WithTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option { return session.WithTracerProvider(tp) }

// WithNamespace sets the first segment of every key (default "baton").
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithMetricLabel sets the value of the metrics' name label: kept as
// given, and not counted toward WithMetricLabelLimit.
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }

// WithSession makes the Election use s instead of creating its own lease: a
// baton *session.Session or an etcd *concurrency.Session, shared with every
// primitive of this process given the same one. The caller keeps
// ownership: Close does not close s, and a lost etcd session is not
// replaced (Campaign then fails, and Run returns, with ErrSessionClosed).
// A key of this election already on the lease is taken over, as etcd's
// Campaign does (see Campaign).
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithLockDelay(d) makes acquisitions wait out a lost holder: after a
// holder of leadership is lost without releasing (its lease expired or was
// revoked, its key deleted), an acquisition with a lock-delay returns no
// sooner than the lost holder's d after etcd made the loss visible, timed
// by etcd (a key on a lease of TTL d). After Resign there is no delay.
// An acquisition without a lock-delay is not bound by another's: give it to
// every contender of the name (docs/compatibility.md says why, and how to
// add one to a name a fleet serves). d is 0 (none) or whole seconds from 2s
// to 1h. docs/primitives.md says what it costs and assumes.
func WithLockDelay(d time.Duration) Option { return config.LockDelay(d) }
