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
// package session are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL.
const (
	DefaultTTL    = core.DefaultTTL
	MinTTL        = core.MinTTL
	DefaultMaxTTL = core.DefaultMaxTTL
)

// WithTTL sets the TTL of the lease the Mutex creates: whole seconds, at
// least MinTTL (2 s), at most the cap (DefaultMaxTTL, 5 min, unless
// WithMaxTTL). Default DefaultTTL (15 s). The lease is renewed every
// TTL/3, so the TTL does not limit how long you hold; it bounds how long a
// crashed holder keeps others waiting. docs/operations.md sizes it. A
// session-wide setting: with WithSession it must agree with the session.
func WithTTL(ttl time.Duration) Option { return config.TTL(ttl) }

// WithMaxTTL sets the cap on the TTL (at least MinTTL), a defence against
// clients that would hold locks through long outages. It also bounds the
// lease of an etcd session given with WithSession. Session-wide.
func WithMaxTTL(maxTTL time.Duration) Option { return config.MaxTTL(maxTTL) }

// WithSession makes the Mutex use s instead of creating its own lease: a
// baton *session.Session, which any number of Mutexes and Elections share
// (one renewal for all, one set of key reservations), or an etcd
// *concurrency.Session, which this Mutex watches with its own renewals.
// The caller keeps ownership: Close does not close s, and a lost etcd
// session is not replaced (Lock then fails with an error wrapping ErrLost).
// Two Mutexes that lock the same name through one etcd session share its
// key, as etcd's own Mutex does; share a session.Session to keep them
// apart.
func WithSession[S *session.Session | *concurrency.Session](s S) Option {
	switch s := any(s).(type) {
	case *session.Session:
		return config.Shared(s)
	case *concurrency.Session:
		return config.Borrowed(s)
	}
	panic("unreachable")
}

// WithNamespace sets the first segment of every key (default "baton"): 1 to
// 64 bytes of letters, digits, '.', '_' and '-'. One namespace per team or
// service makes RBAC one prefix grant.
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithSafetyMargin sets how long before the earliest possible server-side
// expiry a Lock's Context ends: its validity deadline is the send time of
// the last acknowledged renewal + TTL − margin. Default TTL/5; at most
// TTL/2. Raise it if client clocks may run slow. Session-wide.
func WithSafetyMargin(d time.Duration) Option { return config.Margin(d) }

// WithLogger sets the logger (default zap.NewNop()). Losses are logged at
// Warn, failed renewals at Info, acquisitions and releases at Debug, with
// the fields name, key, token and lease (hex). Session-wide.
func WithLogger(l *zap.Logger) Option { return config.Logger(l) }

// WithRegisterer registers the metrics on reg (default: none registered).
// Many mutexes may share one Registerer. Session-wide.
func WithRegisterer(reg prometheus.Registerer) Option { return config.Registerer(reg) }

// WithMaxHeld caps how many keys (locks held, Lock calls waiting, keys
// being deleted) one session may have at once; beyond it Lock fails with
// an error wrapping ErrTooManyHeld. It guards a service that shares one
// session.Session among many names against hoarding locks. 0, the
// default, means no cap. Session-wide.
func WithMaxHeld(n int) Option { return config.MaxHeld(n) }

// WithMetricLabel sets the value of the name label of this Mutex's metrics
// (default: its name). Give many Mutexes one label, such as "job", to
// bound the number of series when names are unbounded (one per customer,
// say); the namespace label is always the namespace.
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }

// WithIdentity sets the value written to this Mutex's keys and shown by
// Holder, Waiters, List, Observe and the baton CLI (default "host:pid"):
// 1 to 256 bytes of UTF-8 without control characters. Name the replica or
// job, not a secret: anyone who may read the namespace sees it.
func WithIdentity(id string) Option { return config.Identity(id) }
