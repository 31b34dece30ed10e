package session

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
)

// Session is a shared lease with its validity watchdog, the deletion
// watches of the keys held through it and their reservations. Its methods
// are safe for concurrent use. Close ends it: holds end with ErrReleased,
// the lease is revoked, and no goroutine of the session runs after.
type Session = core.Session

// Option configures a Session. The same options configure the session a
// Mutex or Election makes for itself.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL.
const (
	DefaultTTL    = core.DefaultTTL
	MinTTL        = core.MinTTL
	DefaultMaxTTL = core.DefaultMaxTTL
)

// New returns a session on cli. It does not contact etcd: the lease is
// granted by the first acquisition. Invalid options are refused with an
// error wrapping ErrInvalid that names the option and its bound.
func New(cli *clientv3.Client, opts ...Option) (*Session, error) {
	cfg, err := config.BuildSession(cli, opts)
	if err != nil {
		return nil, err
	}
	return core.NewSession(cli, cfg.Session), nil
}

// Wrap returns a session on the lease of cs, an etcd session the caller
// owns: the Mutexes and Elections given it share one watchdog and one set
// of key reservations (so that they exclude each other on the same name),
// as with New. Close stops the watchdog and never revokes cs's lease; a
// lost cs is not replaced. WithTTL is refused: the lease has its own.
func Wrap(cs *concurrency.Session, opts ...Option) (*Session, error) {
	if cs == nil {
		return nil, fmt.Errorf("%w: session.Wrap: session must not be nil", ErrInvalid)
	}
	cfg, err := config.BuildSession(cs.Client(), append(opts, config.Borrowed(cs)))
	if err != nil {
		return nil, err
	}
	return core.Borrow(cs, cfg.Session), nil
}

// WithTTL sets the lease's TTL: whole seconds, at least MinTTL, at most
// the cap (DefaultMaxTTL unless WithMaxTTL). Default DefaultTTL.
func WithTTL(ttl time.Duration) Option { return config.TTL(ttl) }

// WithMaxTTL sets the cap on the TTL (at least MinTTL).
func WithMaxTTL(maxTTL time.Duration) Option { return config.MaxTTL(maxTTL) }

// WithSafetyMargin sets how long before the earliest possible server-side
// expiry a hold's Context ends. Default TTL/5; at most TTL/2.
func WithSafetyMargin(d time.Duration) Option { return config.Margin(d) }

// WithMaxHeld caps the keys (held, waiting, or being deleted) through the
// session; beyond it acquisitions fail with ErrTooManyHeld. 0, the
// default, means no cap.
func WithMaxHeld(n int) Option { return config.MaxHeld(n) }

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return config.Logger(l) }

// WithRegisterer sets where the metrics of the mutexes and elections on
// the session are registered (default: nowhere).
func WithRegisterer(reg prometheus.Registerer) Option { return config.Registerer(reg) }
