package mutex

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/session"
)

// Option configures a Mutex, Do or List. New validates all options together
// and rejects bad values with an error wrapping ErrInvalid. The options of
// package session, and a *session.Session itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = core.DefaultTTL, core.MinTTL, core.DefaultMaxTTL

// WithTTL is session.WithTTL: the TTL of the lease a Mutex creates (whole
// seconds, MinTTL to the cap, default 15 s). It bounds how long a crashed
// holder keeps others waiting, not how long one holds. Like WithMaxTTL,
// WithSafetyMargin, WithMaxHeld, WithLogger and WithRegisterer, it is a
// session-wide setting: with WithSession it must agree with the session.
func WithTTL(ttl time.Duration) Option                { return session.WithTTL(ttl) }
func WithMaxTTL(maxTTL time.Duration) Option          { return session.WithMaxTTL(maxTTL) }
func WithSafetyMargin(d time.Duration) Option         { return session.WithSafetyMargin(d) }
func WithMaxHeld(n int) Option                        { return session.WithMaxHeld(n) }
func WithLogger(l *zap.Logger) Option                 { return session.WithLogger(l) }
func WithRegisterer(reg prometheus.Registerer) Option { return session.WithRegisterer(reg) }

// WithSession makes the Mutex use s instead of creating its own lease: a
// baton *session.Session, or an etcd *concurrency.Session. Every primitive
// of this process given the same one shares one lease, watchdog and set of
// key reservations, so two Mutexes locking one name through it exclude
// each other. The caller keeps ownership: Close does not close s, and a
// lost etcd session is not replaced (Lock then fails with an error
// wrapping ErrLost and ErrSessionClosed).
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithNamespace sets the first segment of every key (default "baton"): 1 to
// 64 bytes of letters, digits, '.', '_' and '-'. One namespace per team or
// service makes RBAC one prefix grant.
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithMetricLabel sets the value of the name label of this Mutex's metrics
// (default: its name). Give many Mutexes one label, such as "job", to
// bound the number of series when names are unbounded; the series stay
// until the last of them is closed.
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }

// WithIdentity sets the value written to this Mutex's keys and shown by
// Holder, Waiters, List, Observe and the baton CLI (default "host:pid"):
// 1 to 256 bytes of UTF-8 without control characters. Name the replica or
// job, not a secret: anyone who may read the namespace sees it.
func WithIdentity(id string) Option { return config.Identity(id) }
