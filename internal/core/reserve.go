package core

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/batonhq/baton/internal/errs"
)

// errReserved is returned by a try reservation when another caller in this
// process has the key.
var errReserved = errors.New("key in use by another caller of this session")

// reserve claims key for one caller in this process until release is
// called, waiting while another caller has it (errReserved with try).
// Keys are named after the lease, so without this two goroutines locking
// one name through one session would share a key and both believe they
// hold it; and a key still being deleted after a loss stays reserved until
// it is gone, so it is never adopted by a later acquisition.
func (s *Session) reserve(ctx context.Context, key string, try bool) (release func(), err error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errs.ErrClosed
		}
		if s.reserved == nil {
			s.reserved = make(map[string]chan struct{})
		}
		busy, taken := s.reserved[key]
		if !taken {
			if max := s.cfg.MaxHeld; max > 0 && len(s.reserved) >= max {
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: %d keys (held, waiting or being deleted) on this session, at most %d allowed (WithMaxHeld)",
					errs.ErrTooManyHeld, max, max)
			}
			ch := make(chan struct{})
			s.reserved[key] = ch
			s.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					s.mu.Lock()
					delete(s.reserved, key)
					s.mu.Unlock()
					close(ch)
				})
			}, nil
		}
		s.mu.Unlock()
		if try {
			return nil, errReserved
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
