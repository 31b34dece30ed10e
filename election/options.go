package election

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/lease"
)

// Option configures an Election. New validates all options together
// and rejects bad values with an error wrapping ErrInvalid.
type Option interface{ apply(*config.Config) }

type option config.Setter

func (o option) apply(c *config.Config) { o(c) }

// Bounds of WithTTL and WithMaxTTL.
const (
	DefaultTTL    = config.DefaultTTL
	MinTTL        = config.MinTTL
	DefaultMaxTTL = config.DefaultMaxTTL
)

// WithTTL sets the TTL of the lease the Election creates: whole seconds, at
// least MinTTL (2 s), at most the cap (DefaultMaxTTL, 5 min, unless
// WithMaxTTL). Default DefaultTTL (15 s). The session renews the lease every
// TTL/3, so the TTL does not limit how long you hold; it bounds how long a
// crashed holder keeps others waiting, and how long a stalled one may go
// unrenewed. docs/operations.md sizes it: about three times the p99 of the
// work, within the cap. Not allowed with WithSession.
func WithTTL(ttl time.Duration) Option { return option(config.SetTTL(ttl)) }

// WithMaxTTL sets the cap on the TTL (at least MinTTL), a defence against
// clients that would keep leading through long outages. It also bounds the
// lease of a session given with WithSession.
func WithMaxTTL(maxTTL time.Duration) Option {
	return option(func(c *config.Config) { c.MaxTTL = maxTTL })
}

// WithSession makes the Election use s instead of creating its own lease. The
// caller keeps ownership: Close does not close s, and a lost s is not
// replaced (Campaign then fails with an error wrapping ErrLost). Many elections
// and mutexes can share one session; the Election sends one extra renewal per TTL/3 to
// learn the send time its validity deadline needs.
func WithSession(s *concurrency.Session) Option {
	return option(func(c *config.Config) { c.Session = s })
}

// WithNamespace sets the first segment of every key (default "baton"): 1 to
// 64 bytes of letters, digits, '.', '_' and '-'. One namespace per team or
// service makes RBAC one prefix grant.
func WithNamespace(ns string) Option { return option(func(c *config.Config) { c.Namespace = ns }) }

// WithSafetyMargin sets how long before the earliest possible server-side
// expiry a Term's Context ends: its validity deadline is the send time of
// the last acknowledged renewal + TTL − margin. Default TTL/5; at most
// TTL/2. Raise it if client clocks may run slow against the server's.
func WithSafetyMargin(d time.Duration) Option {
	return option(func(c *config.Config) { c.Margin = d })
}

// WithLogger sets the logger (default zap.NewNop()). Losses are logged at
// Warn, failed renewals at Info, acquisitions and releases at Debug, with
// the fields name, key, token and lease (hex).
func WithLogger(l *zap.Logger) Option { return option(func(c *config.Config) { c.Logger = l }) }

// WithRegisterer registers the metrics on reg (default: none registered).
// Many elections may share one Registerer.
func WithRegisterer(reg prometheus.Registerer) Option {
	return option(func(c *config.Config) { c.Registerer = reg })
}

func build(setters []Option) []config.Setter {
	out := make([]config.Setter, len(setters))
	for i, o := range setters {
		if o == nil {
			out[i] = nil
			continue
		}
		out[i] = o.apply
	}
	return out
}

// WithMaxHeld caps how many keys (locks held, Lock and Campaign calls
// waiting) this process may have at once through one session; beyond it
// Lock and Campaign fail with an error wrapping ErrTooManyHeld. It guards a
// service that shares one session (WithSession) among many names against
// hoarding locks; etcd cannot enforce such a quota itself. 0, the default,
// means no cap.
func WithMaxHeld(n int) Option { return option(func(c *config.Config) { c.MaxHeld = n }) }

// Clock is the time source of the validity watchdog: Go's monotonic clock
// by default. A test can give a slow or frozen one to show that fencing,
// not timing, keeps data safe when a holder's clock misbehaves.
type Clock = lease.Clock

// Timer is a pending Clock.AfterFunc call.
type Timer = lease.Timer

// WithClock sets the watchdog's clock (default: the real monotonic clock).
// It is meant for tests. With WithSession, the first user of a session
// sets the clock of its shared watchdog.
func WithClock(c Clock) Option { return option(func(cfg *config.Config) { cfg.Clock = c }) }
