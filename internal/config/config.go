// Package config holds the settings that mutex and election share, their
// defaults and their validation. Each public package wraps it in its own
// Option type.
package config

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/metrics"
)

// Bounds and defaults.
const (
	DefaultTTL    = 15 * time.Second
	MinTTL        = 2 * time.Second // etcd's minimum lease TTL with default timing
	DefaultMaxTTL = 5 * time.Minute
)

// Config is the validated configuration of one mutex or election.
type Config struct {
	TTL        time.Duration
	ttlSet     bool
	MaxTTL     time.Duration
	Margin     time.Duration
	Namespace  string
	Session    *concurrency.Session
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	Clock      lease.Clock
	MaxHeld    int
}

// Setter is one option's effect.
type Setter func(*Config)

// SetTTL records an explicit TTL.
func SetTTL(d time.Duration) Setter { return func(c *Config) { c.TTL, c.ttlSet = d, true } }

// Build applies the options over the defaults and validates the result.
// Every error wraps errs.ErrInvalid and names the option and its bound.
func Build(cli *clientv3.Client, setters []Setter) (Config, error) {
	c := Config{
		TTL:       DefaultTTL,
		MaxTTL:    DefaultMaxTTL,
		Namespace: keys.DefaultNamespace,
		Logger:    zap.NewNop(),
		Clock:     lease.RealClock{},
	}
	for _, set := range setters {
		if set == nil {
			return c, fmt.Errorf("%w: nil option", errs.ErrInvalid)
		}
		set(&c)
	}
	if cli == nil {
		return c, fmt.Errorf("%w: client must not be nil", errs.ErrInvalid)
	}
	if err := keys.ValidateNamespace(c.Namespace); err != nil {
		return c, fmt.Errorf("WithNamespace: %w", err)
	}
	if c.MaxTTL < MinTTL {
		return c, fmt.Errorf("%w: WithMaxTTL(%v): the cap must be at least %v", errs.ErrInvalid, c.MaxTTL, MinTTL)
	}
	if c.Session != nil {
		if c.ttlSet {
			return c, fmt.Errorf("%w: WithTTL cannot be combined with WithSession: the session's lease has its own TTL", errs.ErrInvalid)
		}
		if c.Session.Client() == nil {
			return c, fmt.Errorf("%w: WithSession: session has no client", errs.ErrInvalid)
		}
	} else {
		switch {
		case c.TTL < MinTTL:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be at least %v", errs.ErrInvalid, c.TTL, MinTTL)
		case c.TTL > c.MaxTTL:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be at most %v (WithMaxTTL)", errs.ErrInvalid, c.TTL, c.MaxTTL)
		case c.TTL%time.Second != 0:
			return c, fmt.Errorf("%w: WithTTL(%v): ttl must be a whole number of seconds, as etcd leases are", errs.ErrInvalid, c.TTL)
		}
	}
	if c.Margin < 0 {
		return c, fmt.Errorf("%w: WithSafetyMargin(%v): margin must not be negative", errs.ErrInvalid, c.Margin)
	}
	if c.Session == nil && c.Margin > c.TTL/2 {
		return c, fmt.Errorf("%w: WithSafetyMargin(%v): margin must be at most half the ttl (%v)", errs.ErrInvalid, c.Margin, c.TTL/2)
	}
	if c.Logger == nil {
		return c, fmt.Errorf("%w: WithLogger: logger must not be nil (zap.NewNop() is the silent one)", errs.ErrInvalid)
	}
	if c.Clock == nil {
		return c, fmt.Errorf("%w: clock must not be nil", errs.ErrInvalid)
	}
	if c.MaxHeld < 0 {
		return c, fmt.Errorf("%w: WithMaxHeld(%d): must not be negative", errs.ErrInvalid, c.MaxHeld)
	}
	return c, nil
}

// Metrics builds and registers the metrics on the configured Registerer.
func (c Config) Metrics() (*metrics.Metrics, error) {
	m, err := metrics.New(c.Registerer)
	if err != nil {
		return nil, fmt.Errorf("%w: WithRegisterer: %w", errs.ErrInvalid, err)
	}
	return m, nil
}

// LeaseConfig is the watchdog configuration.
func (c Config) LeaseConfig(onFailure func()) lease.Config {
	return lease.Config{
		TTL: c.TTL, MaxTTL: c.MaxTTL, Margin: c.Margin, Clock: c.Clock, Logger: c.Logger,
		OnRenewalFailure: onFailure,
	}
}
