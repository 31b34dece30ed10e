package fencing

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/metrics"
)

// Guard is the check a protected resource runs before every write: it
// admits a token greater than or equal to the highest it has admitted for
// the resource (one holder writes many times), and rejects a lower one with
// an error wrapping ErrStale (*StaleError).
type Guard interface {
	Admit(ctx context.Context, resource string, t Token) error
}

// MemoryGuard is a Guard whose high-water marks live in this process's
// memory: right for a resource that lives in the same process, lost on
// restart. It is safe for concurrent use.
type MemoryGuard struct {
	mu      sync.Mutex
	highest map[string]Token
	m       *metrics.Metrics
	log     *zap.Logger
}

var _ Guard = (*MemoryGuard)(nil)

// NewMemoryGuard returns an empty in-memory guard. It panics only if the
// Registerer already holds a different collector named
// baton_fencing_rejections_total, a programming error.
func NewMemoryGuard(opts ...Option) *MemoryGuard {
	c := guardConfig{log: zap.NewNop()}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	m, err := metrics.New(c.reg)
	if err != nil {
		panic(fmt.Sprintf("fencing: register metrics: %v", err))
	}
	return &MemoryGuard{highest: make(map[string]Token), m: m, log: c.log}
}

// Admit admits t for resource if it is at least the highest admitted so
// far, and records it as the new highest.
func (g *MemoryGuard) Admit(_ context.Context, resource string, t Token) error {
	if t <= 0 {
		return fmt.Errorf("%w: token %d for resource %q", ErrMalformed, t, resource)
	}
	g.mu.Lock()
	high := g.highest[resource]
	if t < high {
		g.mu.Unlock()
		g.m.FencingRejections.WithLabelValues(resource).Inc()
		g.log.Warn("stale fencing token rejected", zap.String("resource", resource),
			zap.Int64("token", int64(t)), zap.Int64("highest", int64(high)))
		return &StaleError{Resource: resource, Token: t, Highest: high}
	}
	g.highest[resource] = t
	g.mu.Unlock()
	return nil
}

// Highest returns the highest token admitted for resource, zero if none.
func (g *MemoryGuard) Highest(resource string) Token {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest[resource]
}
