package lease

import (
	"context"
	"fmt"
	"sync"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/errs"
)

// shared keeps one watchdog per borrowed concurrency.Session in the
// process, however many mutexes and elections use it: one renewal per
// TTL/3 for the session, not one per lock, and one set of reservations, so
// that two Mutex values on one session still exclude each other. It is the
// package's only global, because a *concurrency.Session offers no place
// to hang it on; entries go when their last user closes.
var shared = registry{m: make(map[*concurrency.Session]*Session)}

type registry struct {
	mu sync.Mutex
	m  map[*concurrency.Session]*Session
}

// Borrow returns the watchdog of cs, starting one if there is none or the
// last one was lost. Each Borrow must be matched by a Close.
func Borrow(ctx context.Context, cs *concurrency.Session, cfg Config) (*Session, error) {
	if s := shared.take(cs); s != nil {
		return s, s.check(cfg)
	}
	s, err := borrowNew(ctx, cs, cfg)
	if err != nil {
		return nil, err
	}
	s.refs = 1
	shared.mu.Lock()
	if live, ok := shared.m[cs]; ok && !live.Lost() {
		// Another caller started one meanwhile: use it, stop ours.
		live.refs++
		shared.mu.Unlock()
		_ = s.Close()
		return live, live.check(cfg)
	}
	shared.m[cs] = s
	shared.mu.Unlock()
	return s, nil
}

func (r *registry) take(cs *concurrency.Session) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[cs]
	if !ok || s.Lost() {
		return nil
	}
	s.refs++
	return s
}

// release drops one reference and reports whether it was the last.
func (r *registry) release(s *Session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.refs--
	if s.refs > 0 {
		return false
	}
	if r.m[s.cs] == s {
		delete(r.m, s.cs)
	}
	return true
}

// check applies a later user's bounds to a shared watchdog.
func (s *Session) check(cfg Config) error {
	var err error
	switch {
	case cfg.MaxTTL > 0 && s.ttl > cfg.MaxTTL:
		err = fmt.Errorf("%w: session's lease TTL is %v, at most %v allowed (WithMaxTTL)", errs.ErrInvalid, s.ttl, cfg.MaxTTL)
	case cfg.Margin > s.ttl/2:
		err = fmt.Errorf("%w: safety margin %v must be at most half the session's TTL %v", errs.ErrInvalid, cfg.Margin, s.ttl)
	}
	if err != nil {
		_ = s.Close()
	}
	return err
}
