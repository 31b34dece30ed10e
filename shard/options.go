package shard

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/session"
)

// Option configures a Group. New validates all options together and
// rejects bad values with an error wrapping ErrInvalid that names the
// option and its bound. The options of package session, and a
// *session.Session itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = session.DefaultTTL, session.MinTTL, session.DefaultMaxTTL

// DefaultDrainTimeout and MaxDrainTimeout bound WithDrainTimeout.
const (
	DefaultDrainTimeout = 10 * time.Second
	MaxDrainTimeout     = config.MaxDrainTimeout
)

// The options every primitive takes, one definition for all:
//
//   - WithTTL, WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger,
//     WithRegisterer, WithMetricLabelLimit and WithTracerProvider are
//     package session's, which documents them. The TTL bounds how long a crashed member's shards
//     stay without an owner. Each shard a member takes or waits for is one
//     key of the session (WithMaxHeld).
//   - WithNamespace sets the first segment of every key (default "baton").
//   - WithMetricLabel sets the value of the name label of the metrics
//     (default: "shard:" and the group, until the Registerer carries
//     WithMetricLabelLimit names; past them "(other)").
//   - WithIdentity sets the value written to the member's key next to the
//     shard count (default "host:pid"), shown by Members' callers such as
//     the baton CLI. The member name itself is Run's.
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

// WithSession makes the Group use s (a *session.Session or an etcd
// *concurrency.Session) instead of creating its own lease, as
// mutex.WithSession: the member's key and every shard key it takes live on
// that lease. The caller keeps ownership: Close does not close s. One
// lease runs at most one member of a group.
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithDrainTimeout(d) bounds how long a member waits, after ending a
// shard's Context, for its fn to return before it releases the shard anyway
// (default DefaultDrainTimeout; more than 0, at most MaxDrainTimeout). A
// moving shard's new owner waits that long at most for a fn that ignores
// its Context.
func WithDrainTimeout(d time.Duration) Option { return config.DrainTimeout(d) }
