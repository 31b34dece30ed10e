package fencing

import (
	"context"
	"sync"

	"go.uber.org/zap"
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
}

var _ Guard = (*MemoryGuard)(nil)

// NewMemoryGuard returns an empty in-memory guard that neither counts nor
// logs its rejections; NewMemoryGuardWith takes options for that.
func NewMemoryGuard() *MemoryGuard {
	return &MemoryGuard{highest: make(map[string]Token), rej: rejecter{log: zap.NewNop()}}
}

// NewMemoryGuardWith returns an empty in-memory guard that counts its
// rejections on WithRegisterer and logs them to WithLogger. Options that do
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
	return &MemoryGuard{highest: make(map[string]Token), rej: r}, nil
}

// Admit admits t for resource if it is at least the highest admitted so
// far, and records it as the new highest.
func (g *MemoryGuard) Admit(_ context.Context, resource string, t Token) error {
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
