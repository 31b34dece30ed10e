package fencing

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/telemetry"
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
	rej     rejecter
	tr      trace.Tracer
}

var _ Guard = (*MemoryGuard)(nil)

// NewMemoryGuard returns an empty in-memory guard that neither counts nor
// logs its rejections, and traces its checks through the global provider;
// NewMemoryGuardWith takes options for that.
func NewMemoryGuard() *MemoryGuard {
	return &MemoryGuard{highest: make(map[string]Token), rej: rejecter{log: zap.NewNop()}, tr: telemetry.Tracer(nil)}
}

// NewMemoryGuardWith returns an empty in-memory guard that counts its
// rejections on WithRegisterer (WithMetricLabelLimit), logs them to WithLogger and traces its
// checks through WithTracerProvider. Options that do
// not apply to an in-memory guard (WithNamespace, WithTable) are rejected
// with an error wrapping ErrInvalid.
func NewMemoryGuardWith(opts ...Option) (*MemoryGuard, error) {
	c, err := buildConfig("fencing.NewMemoryGuardWith", opts, false, false)
	if err != nil {
		return nil, err
	}
	r, err := newRejecter("fencing.NewMemoryGuardWith", c)
	if err != nil {
		return nil, err
	}
	return &MemoryGuard{highest: make(map[string]Token), rej: r, tr: telemetry.Tracer(c.tp)}, nil
}

// Admit admits t for resource if it is at least the highest admitted so
// far, and records it as the new highest. Inside a trace, the check is a
// span (docs/telemetry.md).
func (g *MemoryGuard) Admit(ctx context.Context, resource string, t Token) error {
	_, f := startCheck(ctx, g.tr, telemetry.SpanAdmit, guardMemory, resource, t)
	err := g.admit(resource, t)
	endCheck(f, err, t)
	return err
}

func (g *MemoryGuard) admit(resource string, t Token) error {
	if t <= 0 {
		return malformed(resource, t)
	}
	g.mu.Lock()
	high := g.highest[resource]
	if t < high {
		g.mu.Unlock()
		return g.rej.stale(resource, t, high)
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
