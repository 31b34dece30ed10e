package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/errs"
)

// releaseTimeout bounds a release whose caller's ctx has already ended.
const releaseTimeout = 5 * time.Second

// OwnerConfig configures an Owner.
type OwnerConfig struct {
	Prefix string
	// NotHeld is the sentinel for a handle that no longer owns.
	NotHeld error
	// OwnSession makes Close close the session.
	OwnSession bool
	// Policy, when set, decides when a key may hold (nil: the oldest alone).
	Policy Policy
	// Tag, when set, gives each acquisition a key of its own:
	// keys.TaggedKey(lease key, Tag, n).
	Tag string
	// Events names the owner and hears its holds begin and end; required.
	Events Events
}

// Events are what the Mutex, Election, Semaphore or RWMutex behind an
// Owner is told. It is an interface, not func fields, so that an Owner
// costs no closure per Mutex: each package implements it on a named type
// of its own struct, which keeps the methods out of its public API.
type Events interface {
	// Label names the lock or election in errors ("mutex \"x\""),
	// formatted only when an error needs it.
	Label() string
	// Started runs when a hold begins, before anything can end it.
	Started(h *Hold)
	// Ended runs once when a hold ends, with the cause (errs.ErrReleased,
	// or a loss with its reason told apart) and how long it was held.
	Ended(h *Hold, cause error, held time.Duration)
}

// Owner is one Mutex or Election on a session: the handles it holds (T is
// *mutex.Lock or *election.Term), its calls in flight, and Close. After
// Close returns, no goroutine of the Owner runs.
type Owner[T any] struct {
	sess *Session
	cfg  OwnerConfig

	closeErr error
	calls    sync.WaitGroup // acquisitions and observers in flight
	bg       sync.WaitGroup // deletions and loss refinements

	// An Owner costs every lock held through it (a service may hold one
	// lock on each of 10,000 Mutexes): no map, channel or context of its
	// own until it needs one, and fields ordered to leave no padding.
	closeOnce sync.Once
	closed    bool // guarded by mu, as is what follows it
	bgClosed  bool
	mu        sync.Mutex
	closing   chan struct{} // made when first needed; closed when Close begins
	inflight  *inflight     // calls in flight, cancelled when Close begins
	held      []held[T]
}

type held[T any] struct {
	h *Hold
	t T
}

// inflight is one call in flight, in a list the Owner cancels on Close.
type inflight struct {
	cancel     context.CancelCauseFunc
	prev, next *inflight
}

// NewOwner returns an Owner on sess.
func NewOwner[T any](sess *Session, cfg OwnerConfig) *Owner[T] {
	return &Owner[T]{sess: sess, cfg: cfg}
}

// closingCh is closed when Close begins.
func (o *Owner[T]) closingCh() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing == nil {
		o.closing = make(chan struct{})
		if o.closed {
			close(o.closing)
		}
	}
	return o.closing
}

// Session is the owner's session.
func (o *Owner[T]) Session() *Session { return o.sess }

// enter counts a call in flight and returns its ctx, which also ends with
// errs.ErrClosed when Close begins; ok is false after Close began. exit
// must be called when the call returns.
func (o *Owner[T]) enter(ctx context.Context) (_ context.Context, exit func(), ok bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &inflight{cancel: cancel}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		cancel(errs.ErrClosed)
		return ctx, nil, false
	}
	o.calls.Add(1)
	c.next = o.inflight
	if c.next != nil {
		c.next.prev = c
	}
	o.inflight = c
	o.mu.Unlock()
	return ctx, func() {
		o.mu.Lock()
		if c.prev != nil {
			c.prev.next = c.next
		} else if o.inflight == c {
			o.inflight = c.next
		}
		if c.next != nil {
			c.next.prev = c.prev
		}
		o.mu.Unlock()
		cancel(nil)
		o.calls.Done()
	}, true
}

// Go runs fn in a goroutine that Close waits for, with a ctx that also
// ends when Close begins; false (fn not run) after Close began.
func (o *Owner[T]) Go(ctx context.Context, fn func(ctx context.Context)) bool {
	ctx, exit, ok := o.enter(ctx)
	if !ok {
		return false
	}
	go func() {
		defer exit()
		fn(ctx)
	}()
	return true
}

// goBG runs fn in a background goroutine Close waits for; false once Close
// stopped accepting them.
func (o *Owner[T]) goBG(fn func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bgClosed {
		return false
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		fn()
	}()
	return true
}

// Acquire queues value and returns a handle made by wrap once it owns. It
// returns ErrBusy for a try that found another owner, errs.ErrClosed after
// Close (also for a call waiting when Close begins).
func (o *Owner[T]) Acquire(ctx context.Context, value string, try bool, wrap func(*Hold) T) (T, error) {
	var zero T
	ctx, exit, ok := o.enter(ctx)
	if !ok {
		return zero, errs.ErrClosed
	}
	defer exit()
	l, err := o.sess.lease(ctx)
	if err != nil {
		return zero, o.wrapErr(err)
	}
	h, err := o.queue(ctx, l, value, try)
	if errors.Is(err, ErrBusy) {
		return zero, err
	}
	if err != nil {
		return zero, o.wrapErr(err)
	}
	handle := wrap(h)
	if f := o.sess.cfg.Hooks.BeforeArm; f != nil {
		f(h.key)
	}
	h.arm() // before Held can return it: Release needs an armed hold
	o.mu.Lock()
	closed := o.closed
	if !closed {
		o.held = append(o.held, held[T]{h, handle})
	}
	o.mu.Unlock()
	if closed {
		_ = h.Release(context.Background())
		return zero, errs.ErrClosed
	}
	return handle, nil
}

// wrapErr names the lock or election in an error; ErrClosed stays bare.
func (o *Owner[T]) wrapErr(err error) error {
	if errors.Is(err, errs.ErrClosed) || o.isClosed() {
		return errs.ErrClosed
	}
	return fmt.Errorf("%s: %w", o.cfg.Events.Label(), err)
}

// Release releases h and forgets it once no retry is due.
func (o *Owner[T]) Release(ctx context.Context, h *Hold) error {
	err := h.Release(ctx)
	if err == nil || errors.Is(err, o.cfg.NotHeld) {
		o.mu.Lock()
		o.held = slices.DeleteFunc(o.held, func(e held[T]) bool { return e.h == h })
		o.mu.Unlock()
	}
	return err
}

// Held returns the handles held, oldest token first.
func (o *Owner[T]) Held() []T {
	o.mu.Lock()
	pairs := slices.Clone(o.held)
	o.mu.Unlock()
	slices.SortFunc(pairs, func(a, b held[T]) int { return cmp.Compare(a.h.rev, b.h.rev) })
	out := make([]T, len(pairs))
	for i, p := range pairs {
		out[i] = p.t
	}
	return out
}

// Close ends every hold with errs.ErrReleased (deleting its key, or
// revoking the lease when the session is the owner's own), makes calls in
// flight and later ones return errs.ErrClosed, closes an own session, and
// waits for every goroutine. It is idempotent.
func (o *Owner[T]) Close() error {
	o.closeOnce.Do(func() { o.closeErr = o.close() })
	return o.closeErr
}

func (o *Owner[T]) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// Refuse is the first step of Close: later calls return errs.ErrClosed
// and calls in flight end with it. An owner made of several Owners (a
// read/write lock) refuses on all of them before it releases anything, so
// that no waiter of one acquires what another releases.
func (o *Owner[T]) Refuse() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	if o.closing != nil {
		close(o.closing)
	}
	for c := o.inflight; c != nil; c = c.next {
		c.cancel(errs.ErrClosed)
	}
}

func (o *Owner[T]) close() error {
	o.Refuse()
	call(o.sess.cfg.Hooks.InClose)
	o.calls.Wait()

	o.mu.Lock()
	holds := make([]*Hold, 0, len(o.held))
	for _, e := range o.held {
		holds = append(holds, e.h)
	}
	o.held = nil
	o.mu.Unlock()
	revoke := o.cfg.OwnSession && !o.sess.IsBorrowed()
	var out []error
	for _, h := range holds {
		if revoke {
			h.abandon() // the revoke below deletes the key
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		if err := h.Release(ctx); err != nil && !errors.Is(err, o.cfg.NotHeld) {
			out = append(out, err)
		}
		cancel()
	}
	if o.cfg.OwnSession {
		if err := o.sess.Close(); err != nil {
			out = append(out, err)
		}
	}
	o.mu.Lock()
	o.bgClosed = true
	o.mu.Unlock()
	o.bg.Wait()
	return errors.Join(out...)
}
