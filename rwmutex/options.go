package rwmutex

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/session"
)

// Option configures an RWMutex. New validates all options together and rejects
// bad values with an error wrapping ErrInvalid that names the option and
// its bound. The options of package session, and a *session.Session
// itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = session.DefaultTTL, session.MinTTL, session.DefaultMaxTTL

// The options every primitive takes, one definition for all, as in
// package mutex, which documents them: WithTTL, WithMaxTTL,
// WithSafetyMargin, WithMaxHeld, WithLogger, WithRegisterer,
// WithMetricLabelLimit and WithTracerProvider (package session's,
// session-wide), WithNamespace (the first segment of every key, default
// "baton"), WithMetricLabel (the metrics' name label, default
// "rwmutex:" and its name until the Registerer carries
// WithMetricLabelLimit names, then "(other)"; label per-entity ones with
// one value per kind) and WithIdentity (the value written to the keys and
// shown, default "host:pid").
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

// WithIdentity sets the value written to the keys and shown by the inspection calls.
func WithIdentity(id string) Option { return config.Identity(id) }

// WithSession makes the RWMutex use s (a *session.Session or an etcd
// *concurrency.Session) instead of creating its own lease, as
// mutex.WithSession. The caller keeps ownership: Close does not close s.
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithLockDelay(d) makes acquisitions wait out a holder of the lock lost
// without Unlock, as mutex.WithLockDelay: d is 0 (none) or whole seconds
// from 2s to 1h.
func WithLockDelay(d time.Duration) Option { return config.LockDelay(d) }
