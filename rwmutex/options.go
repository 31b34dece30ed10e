package rwmutex

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/session"
)

// Option configures an RWMutex: the options of package mutex, with the
// same meaning, bounds and validation. The options of package session, and
// a *session.Session itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = core.DefaultTTL, core.MinTTL, core.DefaultMaxTTL

// WithTTL is session.WithTTL, for the lease an RWMutex creates. The five
// below are session.WithMaxTTL and the others; all six are session-wide.
func WithTTL(ttl time.Duration) Option                { return session.WithTTL(ttl) }
func WithMaxTTL(maxTTL time.Duration) Option          { return session.WithMaxTTL(maxTTL) }
func WithSafetyMargin(d time.Duration) Option         { return session.WithSafetyMargin(d) }
func WithMaxHeld(n int) Option                        { return session.WithMaxHeld(n) }
func WithLogger(l *zap.Logger) Option                 { return session.WithLogger(l) }
func WithRegisterer(reg prometheus.Registerer) Option { return session.WithRegisterer(reg) }

// WithSession makes the RWMutex use s (a *session.Session or an etcd
// *concurrency.Session) instead of creating its own lease, as
// mutex.WithSession. The caller keeps ownership: Close does not close s.
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithNamespace sets the first segment of every key (default "baton").
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithMetricLabel sets the value of the name label of this RWMutex's
// metrics (default "rwmutex:" and its name, apart from a mutex's).
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }

// WithIdentity sets the value stored with each of this RWMutex's keys and
// shown by Holders, Waiters and the baton CLI (default "host:pid").
func WithIdentity(id string) Option { return config.Identity(id) }
