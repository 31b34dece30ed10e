package semaphore

import (
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/session"
)

// Option configures a Semaphore. New validates all options together and rejects
// bad values with an error wrapping ErrInvalid that names the option and
// its bound. The options of package session, and a *session.Session
// itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = session.DefaultTTL, session.MinTTL, session.DefaultMaxTTL

// The options every primitive takes, one definition for all, as in
// package mutex, which documents them: WithTTL, WithMaxTTL,
// WithSafetyMargin, WithMaxHeld, WithLogger, WithRegisterer and
// WithTracerProvider (package session's, session-wide), WithNamespace (the
// first segment of every key, default "baton"), WithMetricLabel (the
// metrics' name label, default "semaphore:" and its name) and WithIdentity
// (the value written to the keys and shown, default "host:pid").
var WithTTL, WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger, WithRegisterer, WithTracerProvider, WithNamespace, WithMetricLabel, WithIdentity = session.WithTTL, session.WithMaxTTL, session.WithSafetyMargin, session.WithMaxHeld, session.WithLogger, session.WithRegisterer, session.WithTracerProvider, config.Namespace, config.MetricLabel, config.Identity

// WithSession makes the Semaphore use s (a *session.Session or an etcd
// *concurrency.Session) instead of creating its own lease, as
// mutex.WithSession. The caller keeps ownership: Close does not close s.
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithLockDelay(d) makes acquisitions wait out a holder of a permit lost
// without Release, as mutex.WithLockDelay: d is 0 (none) or whole seconds
// from 2s to 1h.
var WithLockDelay = config.LockDelay
