package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/lease"
)

// Owner is what a Mutex and an Election share: their session, the handles
// they hold, the cleanups they wait for, and Close. T is the public handle
// (*mutex.Lock, *election.Term).
type Owner[T any] struct {
	label    string // "mutex \"name\"", for errors
	prefix   string
	borrowed bool
	maxHeld  int
	notHeld  error
	sessions *lease.Provider
	bg       sync.WaitGroup

	mu     sync.Mutex
	held   map[*Hold]T
	closed bool
}

// OwnerConfig configures an Owner.
type OwnerConfig struct {
	Label   string
	Prefix  string
	MaxHeld int
	// NotHeld is the sentinel for a handle that no longer owns.
	NotHeld error
	// BorrowedSession is set when the session is the caller's.
	BorrowedSession bool
}

// NewOwner returns an Owner that gets its sessions from p.
func NewOwner[T any](p *lease.Provider, cfg OwnerConfig) *Owner[T] {
	return &Owner[T]{
		label: cfg.Label, prefix: cfg.Prefix, borrowed: cfg.BorrowedSession, maxHeld: cfg.MaxHeld,
		notHeld: cfg.NotHeld, sessions: p, held: make(map[*Hold]T),
	}
}

// Acquire queues value and returns a hold once it owns; wrap makes the
// public handle, onEnd is told when the hold ends. It returns ErrBusy for a
// Try that found another owner, errs.ErrClosed after Close.
func (o *Owner[T]) Acquire(ctx context.Context, value string, try bool, wrap func(*Hold) T, onEnd func(*Hold, error, time.Duration)) (T, error) {
	var zero T
	if o.isClosed() {
		return zero, errs.ErrClosed
	}
	s, err := o.sessions.Get(ctx) // ends with ErrClosed on Close
	if err != nil {
		return zero, o.wrapErr(err)
	}
	r, err := Acquire(ctx, Request{
		Session: s, Prefix: o.prefix, Value: value, Try: try,
		Background: &o.bg, Closing: o.sessions.Closing(), Stop: o.sessions.ClosingContext(), MaxHeld: o.maxHeld,
	})
	if errors.Is(err, ErrBusy) {
		return zero, err
	}
	if err != nil {
		return zero, o.wrapErr(err)
	}
	h := NewHold(s, r, o.notHeld, Hooks{OnEnd: onEnd, Background: &o.bg, Closing: o.sessions.Closing()})
	handle := wrap(h)
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		_ = h.Release(context.Background())
		return zero, errs.ErrClosed
	}
	o.held[h] = handle
	o.mu.Unlock()
	return handle, nil
}

// wrapErr names the lock or election in an error, preferring ErrClosed
// when Close caused it.
func (o *Owner[T]) wrapErr(err error) error {
	if errors.Is(err, errs.ErrClosed) {
		return errs.ErrClosed
	}
	return fmt.Errorf("%s: %w", o.label, err)
}

func (o *Owner[T]) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// Release releases h and forgets it once it no longer needs a retry.
func (o *Owner[T]) Release(ctx context.Context, h *Hold) error {
	err := h.Release(ctx)
	if err == nil || errors.Is(err, o.notHeld) {
		o.mu.Lock()
		delete(o.held, h)
		o.mu.Unlock()
	}
	return err
}

// Held returns the handles held, oldest token first.
func (o *Owner[T]) Held() []T {
	o.mu.Lock()
	holds := make([]*Hold, 0, len(o.held))
	for h := range o.held {
		holds = append(holds, h)
	}
	o.mu.Unlock()
	slices.SortFunc(holds, func(a, b *Hold) int { return cmp.Compare(a.Rev(), b.Rev()) })
	out := make([]T, len(holds))
	o.mu.Lock()
	for i, h := range holds {
		out[i] = o.held[h]
	}
	o.mu.Unlock()
	return out
}

// Close ends every hold with errs.ErrReleased (deleting the keys, or
// revoking the whole lease when it is the owner's), makes waiting and
// later acquisitions return errs.ErrClosed, and waits for every goroutine.
// It is idempotent.
func (o *Owner[T]) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	holds := make([]*Hold, 0, len(o.held))
	for h := range o.held {
		holds = append(holds, h)
	}
	clear(o.held)
	o.mu.Unlock()

	var out []error
	for _, h := range holds {
		if !o.borrowed {
			h.Abandon() // the revoke below deletes the key
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		if err := h.Release(ctx); err != nil && !errors.Is(err, o.notHeld) {
			out = append(out, err)
		}
		cancel()
	}
	if err := o.sessions.Close(); err != nil {
		out = append(out, err)
	}
	o.bg.Wait()
	return errors.Join(out...)
}
