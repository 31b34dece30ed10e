// Package config is the one definition of the options that session, mutex
// and election share, their defaults and their validation. Test-only
// options (clock, pause points) live here too, out of the public API.
package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/metrics"
)

// Option is one setting. Its method takes an internal type, so only baton
// defines options.
type Option interface{ Apply(*Config) }

// Config is the validated configuration of one session, mutex or election.
type Config struct {
	// Session is the session-wide part.
	Session core.Config
	// set names the session-wide options given explicitly, with their
	// values as shown in errors.
	set map[string]string
	// sessionOnly refuses options that are not session-wide.
	sessionOnly bool
	errs        []error

	Namespace   string
	Shared      *core.Session
	Borrowed    *concurrency.Session
	MetricLabel string
	Identity    string
	IdentitySet bool
	// LockDelay is WithLockDelay's: zero for none.
	LockDelay time.Duration
	// Candidate is an election candidate's coordination settings (coord.go).
	Candidate Candidate
	// DrainTimeout is WithDrainTimeout's (a shard group's), DrainSet whether
	// it was given.
	DrainTimeout time.Duration
	DrainSet     bool
}

type opt struct {
	name        string // "WithTTL"
	sessionWide bool
	fn          func(*Config) string // returns the value as shown in errors
}

func (o opt) Apply(c *Config) {
	if c.sessionOnly && !o.sessionWide {
		c.errs = append(c.errs, fmt.Errorf("%w: %s is not a session option", errs.ErrInvalid, o.name))
		return
	}
	v := o.fn(c)
	if o.sessionWide {
		c.set[o.name] = v
	}
}

func sessionOpt(name string, fn func(*Config) string) Option {
	return opt{name: name, sessionWide: true, fn: fn}
}

func plainOpt(name string, fn func(*Config)) Option {
	return opt{name: name, fn: func(c *Config) string { fn(c); return "" }}
}

// TTL sets the TTL of a granted lease.
func TTL(d time.Duration) Option {
	return sessionOpt("WithTTL", func(c *Config) string { c.Session.TTL = d; return d.String() })
}

// MaxTTL caps the TTL.
func MaxTTL(d time.Duration) Option {
	return sessionOpt("WithMaxTTL", func(c *Config) string { c.Session.MaxTTL = d; return d.String() })
}

// Margin sets the safety margin.
func Margin(d time.Duration) Option {
	return sessionOpt("WithSafetyMargin", func(c *Config) string { c.Session.Margin = d; return d.String() })
}

// MaxHeld caps the keys of one session.
func MaxHeld(n int) Option {
	return sessionOpt("WithMaxHeld", func(c *Config) string { c.Session.MaxHeld = n; return fmt.Sprint(n) })
}

// Logger sets the logger.
func Logger(l *zap.Logger) Option {
	return sessionOpt("WithLogger", func(c *Config) string { c.Session.Logger = l; return fmt.Sprintf("%p", l) })
}

// Registerer sets the metrics registerer.
func Registerer(r prometheus.Registerer) Option {
	return sessionOpt("WithRegisterer", func(c *Config) string { c.Session.Registerer = r; return fmt.Sprintf("%p", r) })
}

// MetricLabelLimit bounds the default metric labels on the Registerer.
func MetricLabelLimit(n int) Option {
	return sessionOpt("WithMetricLabelLimit", func(c *Config) string {
		if err := metrics.CheckLabelLimit(n); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: %w", errs.ErrInvalid, err))
		}
		c.Session.MetricLabelLimit = n
		return fmt.Sprint(n)
	})
}

// TracerProvider sets the provider of the spans of a session's primitives.
func TracerProvider(tp trace.TracerProvider) Option {
	return sessionOpt("WithTracerProvider", func(c *Config) string {
		if tp == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithTracerProvider: provider must not be nil (leave the option out for the global one)", errs.ErrInvalid))
		}
		c.Session.TracerProvider = tp
		return fmt.Sprintf("%p", tp)
	})
}

// Untraced makes a session's primitives start no span at all: the
// baseline against which benchmarks measure the default provider's cost.
func Untraced() Option {
	return sessionOpt("untraced", func(c *Config) string { c.Session.Untraced = true; return "" })
}

// KeysToDeadline keeps a lost lease's keys until its validity deadline:
// its revoke waits for it. baton serve's sessions set it, whose remote
// callers are given validity up to that deadline and may not hear of
// the loss.
func KeysToDeadline() Option {
	return sessionOpt("keysToDeadline", func(c *Config) string { c.Session.KeysToDeadline = true; return "" })
}

// Clock sets the watchdog's clock (tests).
func Clock(clock lease.Clock) Option {
	return sessionOpt("WithClock", func(c *Config) string { c.Session.Clock = clock; return fmt.Sprintf("%v", clock) })
}

// Hooks sets the pause points (tests).
func Hooks(h *core.Hooks) Option {
	return sessionOpt("WithHooks", func(c *Config) string { c.Session.Hooks = h; return fmt.Sprintf("%p", h) })
}

// Namespace sets the key namespace.
func Namespace(ns string) Option {
	return plainOpt("WithNamespace", func(c *Config) { c.Namespace = ns })
}

// Shared makes a primitive use a baton session.
func Shared(s *core.Session) Option {
	return plainOpt("WithSession", func(c *Config) {
		if s == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithSession: session must not be nil", errs.ErrInvalid))
		}
		c.Shared = s
	})
}

// Borrowed makes a primitive use the one Session of a caller's etcd
// session; session.Wrap builds its Session the same way.
func Borrowed(cs *concurrency.Session) Option {
	return opt{name: "WithSession", sessionWide: true, fn: func(c *Config) string {
		if cs == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithSession: session must not be nil", errs.ErrInvalid))
		}
		c.Borrowed = cs
		return fmt.Sprintf("%p", cs)
	}}
}

// MetricLabel sets the value of the name label of a primitive's metrics,
// instead of its default (Config.Label).
func MetricLabel(label string) Option {
	return plainOpt("WithMetricLabel", func(c *Config) { c.MetricLabel = label })
}

// Identity sets the value a mutex writes to its key.
func Identity(id string) Option {
	return plainOpt("WithIdentity", func(c *Config) { c.Identity, c.IdentitySet = id, true })
}

// Bounds of WithLockDelay: a delay is a lease's TTL, so whole seconds,
// at least etcd's minimum lease TTL.
const (
	MinLockDelay = core.MinTTL
	MaxLockDelay = time.Hour
)

// LockDelay sets the lock-delay: how long no contender that sets one
// acquires after a holder is lost without releasing (contenders without
// one are not bound: docs/compatibility.md).
func LockDelay(d time.Duration) Option {
	return plainOpt("WithLockDelay", func(c *Config) {
		switch {
		case d < 0 || d > 0 && d < MinLockDelay:
			c.errs = append(c.errs, fmt.Errorf("%w: WithLockDelay(%v): a delay must be 0 (none) or at least %v (etcd's minimum lease TTL)", errs.ErrInvalid, d, MinLockDelay))
		case d > MaxLockDelay:
			c.errs = append(c.errs, fmt.Errorf("%w: WithLockDelay(%v): at most %v", errs.ErrInvalid, d, MaxLockDelay))
		case d%time.Second != 0:
			c.errs = append(c.errs, fmt.Errorf("%w: WithLockDelay(%v): a whole number of seconds, as etcd leases are", errs.ErrInvalid, d))
		}
		c.LockDelay = d
	})
}

// MaxDrainTimeout bounds WithDrainTimeout.
const MaxDrainTimeout = time.Hour

// DrainTimeout sets how long a shard group's member waits for a shard's
// work to return before it releases the shard anyway.
func DrainTimeout(d time.Duration) Option {
	return plainOpt("WithDrainTimeout", func(c *Config) {
		if d <= 0 || d > MaxDrainTimeout {
			c.errs = append(c.errs, fmt.Errorf("%w: WithDrainTimeout(%v): must be more than 0 and at most %v", errs.ErrInvalid, d, MaxDrainTimeout))
		}
		c.DrainTimeout, c.DrainSet = d, true
	})
}

// BuildSession validates the options of a session.
func BuildSession(cli *clientv3.Client, opts []Option) (Config, error) {
	return build(cli, opts, true)
}

// Build validates the options of a mutex or election. Every error wraps
// errs.ErrInvalid and names the option and its bound.
func Build(cli *clientv3.Client, opts []Option) (Config, error) {
	return build(cli, opts, false)
}

func build(cli *clientv3.Client, opts []Option, sessionOnly bool) (Config, error) {
	c := Config{
		Session: core.Config{
			TTL: core.DefaultTTL, MaxTTL: core.DefaultMaxTTL, Logger: zap.NewNop(), Clock: lease.RealClock{},
			MetricLabelLimit: metrics.DefaultLabelLimit,
		},
		set:         make(map[string]string),
		sessionOnly: sessionOnly,
		Namespace:   keys.DefaultNamespace,
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", errs.ErrInvalid)
		}
		o.Apply(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return c, err
	}
	if cli == nil {
		return c, fmt.Errorf("%w: client must not be nil", errs.ErrInvalid)
	}
	if err := keys.ValidateNamespace(c.Namespace); err != nil {
		return c, fmt.Errorf("WithNamespace: %w", err)
	}
	if c.Shared != nil && c.Borrowed != nil {
		return c, fmt.Errorf("%w: WithSession given twice", errs.ErrInvalid)
	}
	if c.Shared != nil {
		return c, c.adoptShared(cli)
	}
	s := &c.Session
	if s.MaxTTL < core.MinTTL {
		return c, fmt.Errorf("%w: WithMaxTTL(%v): the cap must be at least %v", errs.ErrInvalid, s.MaxTTL, core.MinTTL)
	}
	if c.Borrowed != nil {
		if _, ok := c.set["WithTTL"]; ok {
			return c, fmt.Errorf("%w: WithTTL cannot be combined with WithSession: the session's lease has its own TTL", errs.ErrInvalid)
		}
		if c.Borrowed.Client() == nil {
			return c, fmt.Errorf("%w: WithSession: session has no client", errs.ErrInvalid)
		}
	} else {
		switch {
		case s.TTL < core.MinTTL:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be at least %v", errs.ErrInvalid, s.TTL, core.MinTTL)
		case s.TTL > s.MaxTTL:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be at most %v (WithMaxTTL)", errs.ErrInvalid, s.TTL, s.MaxTTL)
		case s.TTL%time.Second != 0:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be a whole number of seconds, as etcd leases are", errs.ErrInvalid, s.TTL)
		case s.Margin > s.TTL/2:
			return c, fmt.Errorf("%w: WithSafetyMargin(%v): margin must be at most half the ttl (%v)", errs.ErrInvalid, s.Margin, s.TTL/2)
		}
	}
	switch {
	case s.Margin < 0:
		return c, fmt.Errorf("%w: WithSafetyMargin(%v): margin must not be negative", errs.ErrInvalid, s.Margin)
	case s.Logger == nil:
		return c, fmt.Errorf("%w: WithLogger: logger must not be nil (zap.NewNop() is the silent one)", errs.ErrInvalid)
	case s.Clock == nil:
		return c, fmt.Errorf("%w: clock must not be nil", errs.ErrInvalid)
	case s.MaxHeld < 0:
		return c, fmt.Errorf("%w: WithMaxHeld(%d): must not be negative", errs.ErrInvalid, s.MaxHeld)
	}
	return c, nil
}

// adoptShared takes the session-wide settings from a baton session; one
// given here too must agree with it.
func (c *Config) adoptShared(cli *clientv3.Client) error {
	if c.Shared.Client() != cli {
		return fmt.Errorf("%w: WithSession: the session uses another etcd client", errs.ErrInvalid)
	}
	err := c.agree(c.Shared.Settings())
	c.Session = c.Shared.Settings()
	return err
}

// agree checks the session-wide options given explicitly (but those in
// except) against the session's settings.
func (c *Config) agree(theirs core.Config, except ...string) error {
	mine := c.Session
	// Formatted only for the options given: a Mutex per name on a shared
	// session passes here once per name.
	values := func(name string) (string, string) {
		switch name {
		case "WithTTL":
			return mine.TTL.String(), theirs.TTL.String()
		case "WithMaxTTL":
			return mine.MaxTTL.String(), theirs.MaxTTL.String()
		case "WithSafetyMargin":
			return mine.Margin.String(), theirs.Margin.String()
		case "WithMaxHeld":
			return fmt.Sprint(mine.MaxHeld), fmt.Sprint(theirs.MaxHeld)
		case "WithLogger":
			return fmt.Sprintf("%p", mine.Logger), fmt.Sprintf("%p", theirs.Logger)
		case "WithRegisterer":
			return fmt.Sprintf("%p", mine.Registerer), fmt.Sprintf("%p", theirs.Registerer)
		case "WithMetricLabelLimit":
			return fmt.Sprint(mine.MetricLabelLimit), fmt.Sprint(theirs.MetricLabelLimit)
		case "WithClock":
			return fmt.Sprintf("%v", mine.Clock), fmt.Sprintf("%v", theirs.Clock)
		case "WithHooks":
			return fmt.Sprintf("%p", mine.Hooks), fmt.Sprintf("%p", theirs.Hooks)
		}
		return fmt.Sprintf("%p", mine.TracerProvider), fmt.Sprintf("%p", theirs.TracerProvider) // WithTracerProvider
	}
	var out []error
	for _, name := range []string{"WithTTL", "WithMaxTTL", "WithSafetyMargin", "WithMaxHeld", "WithLogger", "WithRegisterer", "WithMetricLabelLimit", "WithClock", "WithHooks", "WithTracerProvider"} {
		if _, given := c.set[name]; !given || slices.Contains(except, name) {
			continue
		}
		if v0, v1 := values(name); v0 != v1 {
			out = append(out, fmt.Errorf("%w: %s(%s) conflicts with the session's %s: session-wide settings are set once, on the session",
				errs.ErrInvalid, name, v0, v1))
		}
	}
	return errors.Join(out...)
}

// NewSession returns the session a primitive uses: the shared one, the one
// Session of the borrowed etcd session (whose session-wide settings, when
// given here too, must agree with the first user's), or its own. own says
// whether the primitive must close (or detach) it.
func (c *Config) NewSession(cli *clientv3.Client) (s *core.Session, own bool, err error) {
	switch {
	case c.Shared != nil:
		return c.Shared, false, nil
	case c.Borrowed != nil:
		s, created := core.Attach(c.Borrowed, c.Session)
		if created {
			return s, true, nil
		}
		theirs := s.Settings()
		if err := c.agree(theirs, "WithLogger", "WithRegisterer", "WithMetricLabelLimit"); err != nil {
			_ = s.Detach()
			return nil, false, err
		}
		// The logger and the Registerer (with its label limit) may be this
		// primitive's own.
		if _, ok := c.set["WithLogger"]; !ok {
			c.Session.Logger = theirs.Logger
		}
		if _, ok := c.set["WithRegisterer"]; !ok {
			c.Session.Registerer = theirs.Registerer
		}
		if _, ok := c.set["WithMetricLabelLimit"]; !ok {
			c.Session.MetricLabelLimit = theirs.MetricLabelLimit
		}
		return s, true, nil
	}
	return core.NewSession(cli, c.Session), true, nil
}

// Metrics builds and registers the metrics on the configured Registerer,
// once per session for each Registerer: registering a dozen collectors
// again (to find them registered) costs a primitive opened per request
// more than its lock.
func (c Config) Metrics(sess *core.Session) (*metrics.Metrics, error) {
	build := func() (any, error) {
		m, err := metrics.New(c.Session.Registerer)
		if err != nil {
			return nil, fmt.Errorf("%w: WithRegisterer: %w", errs.ErrInvalid, err)
		}
		return m, nil
	}
	reg := c.Session.Registerer
	var v any
	var err error
	// Only a pointer is sure to be a usable key: a struct may hold a
	// value (a slice's) whose comparison panics.
	if reg == nil || reflect.TypeOf(reg).Kind() != reflect.Pointer {
		v, err = build()
	} else {
		v, err = sess.Cached(metricsOf{reg}, build)
	}
	if err != nil || v == nil {
		return nil, err
	}
	return v.(*metrics.Metrics), nil
}

// metricsOf keys a session's metrics of one Registerer.
type metricsOf struct{ reg any }

// Primitive describes one kind of primitive to Open.
type Primitive struct {
	Kind        metrics.Kind
	Keys        keys.Kind
	LabelPrefix string // the default metric label is LabelPrefix + name
	// Errs are the primitive's errors, one value per package.
	Errs *core.Errors
}

// Open validates name and opts and returns the Owner of a new primitive,
// with its configuration and the value its keys carry (WithIdentity's).
func Open[T any](cli *clientv3.Client, p Primitive, name string, opts []Option) (*core.Owner[T], Config, string, error) {
	o, cfg, value, _, err := OpenSession[T](cli, p, name, opts)
	return o, cfg, value, err
}

// OpenSession is Open that also returns the Owner's session, for a
// primitive that keeps more keys on it.
func OpenSession[T any](cli *clientv3.Client, p Primitive, name string, opts []Option) (*core.Owner[T], Config, string, *core.Session, error) {
	if err := keys.ValidateName(metrics.KindNames[p.Kind]+" name", name); err != nil {
		return nil, Config{}, "", nil, err
	}
	cfg, value, err := prepare(cli, opts)
	if err != nil {
		return nil, cfg, "", nil, err
	}
	if cfg.Candidate.Set != "" && p.Kind != metrics.Election {
		return nil, cfg, "", nil, fmt.Errorf("%w: %s is an election option, not a %s one", errs.ErrInvalid, cfg.Candidate.Set, metrics.KindNames[p.Kind])
	}
	if cfg.DrainSet {
		return nil, cfg, "", nil, fmt.Errorf("%w: WithDrainTimeout is a shard group option, not a %s one", errs.ErrInvalid, metrics.KindNames[p.Kind])
	}
	sess, own, err := cfg.NewSession(cli)
	if err != nil {
		return nil, cfg, "", nil, err
	}
	met, err := cfg.Metrics(sess)
	if err != nil {
		if own {
			_ = closeOwn(sess)
		}
		return nil, cfg, "", nil, err
	}
	return newOwner[T](p, cfg, met, sess, own, name), cfg, value, sess, nil
}

// OpenAll is Open for several names on one session (mutex.Set's). The
// Owners leave the session open: the caller closes (or detaches) it when
// own. The names must have been validated.
func OpenAll[T any](cli *clientv3.Client, p Primitive, names []string, opts []Option) (_ []*core.Owner[T], _ *core.Session, own bool, _ Config, value string, _ error) {
	cfg, value, err := prepare(cli, opts)
	if err != nil {
		return nil, nil, false, cfg, "", err
	}
	if cfg.Candidate.Set != "" {
		return nil, nil, false, cfg, "", fmt.Errorf("%w: %s is an election option, not a mutex one", errs.ErrInvalid, cfg.Candidate.Set)
	}
	if cfg.DrainSet {
		return nil, nil, false, cfg, "", fmt.Errorf("%w: WithDrainTimeout is a shard group option, not a mutex one", errs.ErrInvalid)
	}
	sess, own, err := cfg.NewSession(cli)
	if err != nil {
		return nil, nil, false, cfg, "", err
	}
	met, err := cfg.Metrics(sess)
	if err != nil {
		if own {
			_ = closeOwn(sess)
		}
		return nil, nil, false, cfg, "", err
	}
	owners := make([]*core.Owner[T], len(names))
	for i, name := range names {
		owners[i] = newOwner[T](p, cfg, met, sess, false, name)
	}
	return owners, sess, own, cfg, value, nil
}

// OpenGroup validates opts for a primitive that builds its own Owners on
// one session (a shard group's, one per shard it takes): its configuration,
// the session (own: the caller ends it with CloseOwn), the metrics and the
// identity. WithLockDelay and the election options are refused.
func OpenGroup(cli *clientv3.Client, opts []Option) (_ Config, _ *core.Session, own bool, _ *metrics.Metrics, identity string, _ error) {
	cfg, value, err := prepare(cli, opts)
	switch {
	case err != nil:
		return cfg, nil, false, nil, "", err
	case cfg.Candidate.Set != "":
		return cfg, nil, false, nil, "", fmt.Errorf("%w: %s is an election option, not a shard group one", errs.ErrInvalid, cfg.Candidate.Set)
	case cfg.LockDelay != 0:
		return cfg, nil, false, nil, "", fmt.Errorf("%w: WithLockDelay is not a shard group option (a shard moves by hand-over)", errs.ErrInvalid)
	}
	sess, own, err := cfg.NewSession(cli)
	if err != nil {
		return cfg, nil, false, nil, "", err
	}
	met, err := cfg.Metrics(sess)
	if err != nil {
		if own {
			_ = closeOwn(sess)
		}
		return cfg, nil, false, nil, "", err
	}
	return cfg, sess, own, met, value, nil
}

// CloseOwn closes a session OpenGroup made, or detaches a borrowed one.
func CloseOwn(s *core.Session) error { return closeOwn(s) }

func prepare(cli *clientv3.Client, opts []Option) (Config, string, error) {
	cfg, err := Build(cli, opts)
	if err != nil {
		return cfg, "", err
	}
	value, err := cfg.HolderIdentity()
	return cfg, value, err
}

func newOwner[T any](p Primitive, cfg Config, met *metrics.Metrics, sess *core.Session, own bool, name string) *core.Owner[T] {
	label := cfg.Label(met, p.LabelPrefix+name)
	rec := metrics.Recorder{Metrics: met, Logger: cfg.Session.Logger, Kind: p.Kind, Name: name, Namespace: cfg.Namespace, Label: label}
	return core.NewOwner[T](sess, core.OwnerConfig{Recorder: rec, Prefix: keys.Prefix(cfg.Namespace, p.Keys, name),
		Errs: p.Errs, Own: own})
}

// Label returns the name label of a primitive whose default is def: the
// WithMetricLabel value when one was given (the caller's choice: kept, and
// not counted against the limit), else def, or metrics.Other once the
// Registerer carries WithMetricLabelLimit default values. The Registerer's
// first collapse is logged at Warn.
func (c Config) Label(met *metrics.Metrics, def string) string {
	if c.MetricLabel != "" {
		return c.MetricLabel
	}
	label, first := met.Label(c.Namespace, def, c.Session.MetricLabelLimit)
	if first {
		c.Session.Logger.Warn("metric label limit reached: this primitive, and every later one without a label the Registerer already carries, records its metrics under name=\""+metrics.Other+"\"; give per-entity primitives one WithMetricLabel",
			zap.String("name", def), zap.String("namespace", c.Namespace), zap.Int("limit", c.Session.MetricLabelLimit))
	}
	return label
}

// Session is WithSession of every primitive: s is a *session.Session (an
// Option itself) or an etcd *concurrency.Session.
func Session(s any) Option {
	if cs, ok := s.(*concurrency.Session); ok {
		return Borrowed(cs)
	}
	return s.(Option)
}

func closeOwn(s *core.Session) error {
	if s.IsBorrowed() {
		return s.Detach()
	}
	return s.Close()
}
