package session

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/metrics"
)

// Session is a lease shared by any number of primitives, with its validity
// watchdog, the deletion watch of the keys held through it and their
// reservations. Its methods are safe for concurrent use. A *Session is
// itself an Option: given to a primitive's New it means WithSession(s).
type Session struct {
	s       *core.Session
	wrapped bool
	once    sync.Once
	err     error
}

// Settings are a session's session-wide settings (a zero Margin means
// the default, TTL/5).
type Settings struct {
	TTL, MaxTTL, Margin time.Duration
	MaxHeld             int
	Logger              *zap.Logger
	Registerer          prometheus.Registerer
	MetricLabelLimit    int
}

// Option configures a Session. The same options configure the session a
// primitive makes for itself.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL.
const (
	DefaultTTL    = core.DefaultTTL
	MinTTL        = core.MinTTL
	DefaultMaxTTL = core.DefaultMaxTTL
)

// Bounds of WithMetricLabelLimit, and the name label value of the
// primitives it refuses one of their own.
const (
	DefaultMetricLabelLimit = metrics.DefaultLabelLimit
	MaxMetricLabelLimit     = metrics.MaxLabelLimit
	OtherMetricLabel        = metrics.Other
)

// New returns a session on cli. It does not contact etcd: the lease is
// granted by the first acquisition. Invalid options are refused with an
// error wrapping ErrInvalid that names the option and its bound.
func New(cli *clientv3.Client, opts ...Option) (*Session, error) {
	cfg, err := config.BuildSession(cli, opts)
	if err != nil {
		return nil, err
	}
	return &Session{s: core.NewSession(cli, cfg.Session)}, nil
}

// Wrap returns a session on the lease of cs, an etcd session the caller
// owns. It is the same session every primitive given cs with WithSession
// uses, so all of them exclude each other on a name and share one watchdog.
// Close ends this use of it and never revokes cs's lease; a lost cs is not
// replaced. WithTTL is refused: the lease has its own.
func Wrap(cs *concurrency.Session, opts ...Option) (*Session, error) {
	if cs == nil {
		return nil, fmt.Errorf("%w: session.Wrap: session must not be nil", ErrInvalid)
	}
	cfg, err := config.BuildSession(cs.Client(), append(opts, config.Borrowed(cs)))
	if err != nil {
		return nil, err
	}
	s, _, err := cfg.NewSession(cs.Client())
	if err != nil {
		return nil, err
	}
	return &Session{s: s, wrapped: true}, nil
}

// Apply makes s the session of the primitive being configured: it is how
// each primitive's WithSession hands a *Session to the configuration it
// builds (a *Session is an Option). It is not meant to be called; give the
// session with WithSession.
func (s *Session) Apply(c *config.Config) {
	if c == nil {
		return
	}
	if s == nil {
		config.Shared(nil).Apply(c)
		return
	}
	config.Shared(s.s).Apply(c)
}

// Client is the etcd client the session uses.
func (s *Session) Client() *clientv3.Client { return s.s.Client() }

// Lease is the current lease, or clientv3.NoLease before the first
// acquisition granted one.
func (s *Session) Lease() clientv3.LeaseID { return s.s.LeaseID() }

// Done is closed when the session is closed, or when a wrapped etcd
// session ends.
func (s *Session) Done() <-chan struct{} { return s.s.Done() }

// Settings returns the session-wide settings.
func (s *Session) Settings() Settings {
	c := s.s.Settings()
	return Settings{TTL: c.TTL, MaxTTL: c.MaxTTL, Margin: c.Margin, MaxHeld: c.MaxHeld, Logger: c.Logger, Registerer: c.Registerer, MetricLabelLimit: c.MetricLabelLimit}
}

// IsBorrowed reports whether the lease belongs to a caller's etcd session
// (Wrap).
func (s *Session) IsBorrowed() bool { return s.s.IsBorrowed() }

// OnRenewalFailure registers fn to be called after every failed renewal of
// the session's lease; the returned func unregisters it.
//
// Deprecated: the metric baton_session_renewal_failures_total counts them.
func (s *Session) OnRenewalFailure(fn func()) (remove func()) { return s.s.OnRenewalFailure(fn) }

// Close ends every hold on the session with ErrReleased, revokes the lease
// the session granted (a wrapped etcd session's is left to its owner), and
// waits for the session's goroutines; keys etcd could not delete on a
// wrapped lease are deleted in the background until that lease ends. Close
// returns within a few seconds even when etcd is unreachable, and is
// idempotent.
func (s *Session) Close() error {
	s.once.Do(func() {
		if s.wrapped {
			s.err = s.s.Detach()
		} else {
			s.err = s.s.Close()
		}
	})
	return s.err
}

// WithTTL sets the lease's TTL: whole seconds, at least MinTTL, at most the
// cap (DefaultMaxTTL unless WithMaxTTL). Default DefaultTTL. The lease is
// renewed every TTL/3, so the TTL does not limit how long one holds; it
// bounds how long a crashed holder keeps others waiting.
func WithTTL(ttl time.Duration) Option { return config.TTL(ttl) }

// WithMaxTTL sets the cap on the TTL (at least MinTTL), a defence against
// clients that would hold through long outages; it also bounds the lease of
// an etcd session given to WithSession.
func WithMaxTTL(maxTTL time.Duration) Option { return config.MaxTTL(maxTTL) }

// WithSafetyMargin sets how long before the earliest possible server-side
// expiry a hold's Context ends: its validity deadline is the send time of
// the last acknowledged renewal + TTL − margin. Default TTL/5; at most
// TTL/2. Raise it if client clocks may run slow.
func WithSafetyMargin(d time.Duration) Option { return config.Margin(d) }

// WithMaxHeld caps the keys (held, waiting, or being deleted) through the
// session; beyond it acquisitions fail with ErrTooManyHeld. 0, the
// default, means no cap.
func WithMaxHeld(n int) Option { return config.MaxHeld(n) }

// WithLogger sets the logger (default zap.NewNop()). Losses are logged at
// Warn, failed renewals at Info, acquisitions and releases at Debug, with
// the fields name, namespace, key, token and lease (hex).
func WithLogger(l *zap.Logger) Option { return config.Logger(l) }

// WithRegisterer sets where metrics are registered (default: nowhere). Many
// primitives may share one Registerer, and one metric label.
func WithRegisterer(reg prometheus.Registerer) Option { return config.Registerer(reg) }

// WithMetricLabelLimit bounds the values of the name label that primitives
// give their metrics by default — their name, or "semaphore:", "rwmutex:"
// or "shard:" and their name — so that a process that opens a primitive
// per entity (a lock per order) does not export series per entity, for
// ever: n is 1 to MaxMetricLabelLimit, default DefaultMetricLabelLimit,
// counted per Registerer over every namespace and kind of primitive.
//
//   - A primitive records under its default value if the Registerer
//     already carries it or carries fewer than n; otherwise under
//     name="(other)" (OtherMetricLabel) in its namespace, and
//     baton_metric_labels_collapsed_total{label="name"} counts it, once per
//     New. The Registerer's first collapse is logged at Warn. A primitive
//     named "(other)" records there too.
//   - A value keeps its place for the Registerer's life, used or not: which
//     names have series of their own does not shift with traffic, and a
//     Registerer never carries more than n default values, plus one
//     "(other)" per namespace. The series of a value are deleted when the
//     last primitive using it is closed, as before; one of that name
//     opened later records under it again.
//   - A WithMetricLabel value is the caller's choice: kept as given, and
//     not counted toward n. It is how to label per-entity primitives: one
//     value per kind of entity ("order"), never per entity.
//   - Primitives of one Registerer with different limits each obey their
//     own when they are made, so the Registerer carries at most the
//     largest.
//
// "(other)" mixes whatever it holds: its acquisitions, holds and losses are
// those of every collapsed primitive, and an election's leader gauge under
// it is 1 while any of them leads. Raise n, or label, when the collapsed
// counter grows (docs/operations.md, BatonMetricLabelsCollapsed).
func WithMetricLabelLimit(n int) Option { return config.MetricLabelLimit(n) }

// WithTracerProvider records an OpenTelemetry span for every wait, hold
// and release of the session's primitives (docs/telemetry.md) through tp,
// instead of the global provider, which records nothing until the
// application installs one. A handle's Context carries its hold's span,
// so work done under it is the hold's child.
func WithTracerProvider(tp trace.TracerProvider) Option { return config.TracerProvider(tp) }
