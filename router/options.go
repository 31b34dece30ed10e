package router

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// Option configures a Router. New validates all options together and
// rejects a bad value with an error naming the option and its bound.
type Option interface{ apply(*settings) }

type option func(*settings)

func (o option) apply(s *settings) { o(s) }

// Bounds of WithDialTimeout.
const (
	DefaultDialTimeout = 5 * time.Second
	MaxDialTimeout     = time.Minute
)

type settings struct {
	dialTimeout time.Duration
	logger      *zap.Logger
	getenv      func(string) string
}

// WithDialTimeout bounds the opening of one cluster's connection (and its
// authentication when the cluster has credentials): more than zero, at
// most MaxDialTimeout. Default DefaultDialTimeout (5 s).
func WithDialTimeout(d time.Duration) Option { return option(func(s *settings) { s.dialTimeout = d }) }

// WithLogger sets the logger of the etcd clients the Router opens. Default
// zap.NewNop().
func WithLogger(l *zap.Logger) Option { return option(func(s *settings) { s.logger = l }) }

// WithGetenv sets how the environment variables named by passwordEnv are
// read. Default os.Getenv.
func WithGetenv(f func(string) string) Option { return option(func(s *settings) { s.getenv = f }) }

func newSettings(opts []Option) (settings, error) {
	s := settings{dialTimeout: DefaultDialTimeout, logger: zap.NewNop(), getenv: os.Getenv}
	for _, o := range opts {
		if o != nil {
			o.apply(&s)
		}
	}
	switch {
	case s.dialTimeout <= 0 || s.dialTimeout > MaxDialTimeout:
		return s, fmt.Errorf("router: WithDialTimeout(%v): must be more than 0 and at most %v", s.dialTimeout, MaxDialTimeout)
	case s.logger == nil:
		return s, fmt.Errorf("router: WithLogger(nil): a logger is needed; zap.NewNop() is silent")
	case s.getenv == nil:
		return s, fmt.Errorf("router: WithGetenv(nil): a function is needed")
	}
	return s, nil
}
