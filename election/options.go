package election

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/session"
)

// Option configures an Election. New validates all options together and
// rejects bad values with an error wrapping ErrInvalid. The options of
// package session, and a *session.Session itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = core.DefaultTTL, core.MinTTL, core.DefaultMaxTTL

// WithTTL is session.WithTTL: the TTL of the lease an Election creates. It
// bounds how long a crashed leader keeps others waiting, not how long one
// leads. WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger and
// WithRegisterer are the session package's too; each is session-wide.
func WithTTL(ttl time.Duration) Option                { return session.WithTTL(ttl) }
func WithMaxTTL(maxTTL time.Duration) Option          { return session.WithMaxTTL(maxTTL) }
func WithSafetyMargin(d time.Duration) Option         { return session.WithSafetyMargin(d) }
func WithMaxHeld(n int) Option                        { return session.WithMaxHeld(n) }
func WithLogger(l *zap.Logger) Option                 { return session.WithLogger(l) }
func WithRegisterer(reg prometheus.Registerer) Option { return session.WithRegisterer(reg) }

// WithSession makes the Election use s instead of creating its own lease: a
// baton *session.Session or an etcd *concurrency.Session, shared with every
// primitive of this process given the same one. The caller keeps
// ownership: Close does not close s, and a lost etcd session is not
// replaced (Campaign then fails, and Run returns, with ErrSessionClosed).
// A key of this election already on the lease is taken over, as etcd's
// Campaign does (see Campaign).
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithNamespace sets the first segment of every key (default "baton"), as
// mutex.WithNamespace.
func WithNamespace(ns string) Option { return config.Namespace(ns) }

// WithMetricLabel sets the value of the name label of this Election's
// metrics (default: its name); the leader gauge then counts the terms held
// under that label.
func WithMetricLabel(label string) Option { return config.MetricLabel(label) }
