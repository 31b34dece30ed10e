package core

import (
	"context"
	"errors"
	"fmt"

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
func (s *Session) reserve(ctx context.Context, key string, try bool) (*reservation, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errs.ErrClosed
		}
		if s.reserved == nil {
			s.reserved = make(map[string]*reservation)
		}
		busy, taken := s.reserved[key]
		if !taken {
			if max := s.cfg.MaxHeld; max > 0 && len(s.reserved) >= max {
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: %d keys (held, waiting or being deleted) on this session, at most %d allowed (WithMaxHeld)",
					errs.ErrTooManyHeld, max, max)
			}
			r := &reservation{s: s, key: key}
			s.reserved[key] = r
			s.mu.Unlock()
			return r, nil
		}
		if try {
			s.mu.Unlock()
			return nil, errReserved
		}
		if busy.freed == nil {
			busy.freed = make(chan struct{}) // only a waiter pays for one
		}
		freed := busy.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// reservation is one key claimed in this process. It costs every lock
// held, so it is 32 bytes: key is emptied when freed, instead of a flag.
type reservation struct {
	s     *Session
	key   string        // "" once freed; guarded by s.mu
	freed chan struct{} // made by the first waiter; guarded by s.mu
}

// free ends the reservation; later calls do nothing.
func (r *reservation) free() {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.key == "" {
		return
	}
	if r.s.reserved[r.key] == r {
		delete(r.s.reserved, r.key)
	}
	r.key = ""
	if r.freed != nil {
		close(r.freed)
	}
}
