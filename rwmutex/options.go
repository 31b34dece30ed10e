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

// Option configures an RWMutex. They are the options of package mutex,
// with the same meaning, bounds and validation; New rejects bad values with
// an error wrapping ErrInvalid. The options of package session are
// accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL.
const (
	DefaultTTL    = core.DefaultTTL
	MinTTL        = core.MinTTL
	DefaultMaxTTL = core.DefaultMaxTTL
)

// WithTTL sets the TTL of the lease the RWMutex creates: whole seconds,
// at least MinTTL, at most the cap (WithMaxTTL). Default DefaultTTL.
// Session-wide.
func WithTTL(ttl time.Duration) Option { return config.TTL(ttl) }

// WithMaxTTL sets the cap on the TTL (at least MinTTL). Session-wide.
func WithMaxTTL(maxTTL time.Duration) Option { return config.MaxTTL(maxTTL) }

// WithSession makes the RWMutex use s instead of creating its own lease:
// a baton *session.Session shared with any number of mutexes, elections,
// semaphores and read/write locks, or an etcd *concurrency.Session. The
// caller keeps ownership: Close does not close s.
func WithSession[S *session.Session | *concurrency.Session](s S) Option {
	switch s := any(s).(type) {
	case *session.Session:
		return config.Shared(s)
	case *concurrency.Session:
		return config.Borrowed(s)
	}
	panic("unreachable")
}

// WithNamespace sets the first segment of every key (default "baton").
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithSafetyMargin sets how long before the earliest possible server-side
// expiry a Lock's Context ends. Default TTL/5; at most TTL/2.
// Session-wide.
func WithSafetyMargin(d time.Duration) Option { return config.Margin(d) }

// WithLogger sets the logger (default zap.NewNop()). Session-wide.
func WithLogger(l *zap.Logger) Option { return config.Logger(l) }

// WithRegisterer registers the metrics on reg (default: none).
// Session-wide.
func WithRegisterer(reg prometheus.Registerer) Option { return config.Registerer(reg) }

// WithMaxHeld caps how many keys (locks held, calls waiting,
// keys being deleted) one session may have at once. 0 means no cap.
// Session-wide.
func WithMaxHeld(n int) Option { return config.MaxHeld(n) }

// WithMetricLabel sets the value of the name label of this RWMutex's
// metrics (default "rwmutex:" and its name, apart from a mutex of the
// same name).
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }

// WithIdentity sets the value stored with each of this RWMutex's keys and
// shown by Holders, Waiters and the baton CLI (default "host:pid"): at
// most 256 bytes of UTF-8 without control characters.
func WithIdentity(id string) Option { return config.Identity(id) }
