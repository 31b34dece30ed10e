// Package core is baton's one implementation of sessions, queues and holds,
// shared by mutex and election (and exposed as session.Session).
//
// A Session owns the etcd lease (granted on first use and replaced after a
// loss, or borrowed from a caller's concurrency.Session), its validity
// watchdog, one deletion watch per namespace and the key reservations of
// this process. An Owner is one Mutex or Election on a Session: its holds,
// its calls in flight and its Close.
package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/retry"
)

// Bounds and defaults of the session settings.
const (
	DefaultTTL    = 15 * time.Second
	MinTTL        = 2 * time.Second // etcd's minimum lease TTL with default timing
	DefaultMaxTTL = 5 * time.Minute

	// grantCap bounds one lease grant.
	grantCap = 10 * time.Second
	// revokeTimeout bounds a revoke on Close; an unrevoked lease expires anyway.
	revokeTimeout = 2 * time.Second
)

// Config is the session-wide configuration.
type Config struct {
	TTL    time.Duration
	MaxTTL time.Duration
	// Margin is subtracted from the validity deadline; zero picks TTL/5.
	Margin     time.Duration
	MaxHeld    int
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	Clock      Clock
	Hooks      *Hooks
}

// Session is one etcd lease at a time, its validity watchdog, the deletion
// watches of the keys held on it and the reservations of those keys. It is
// safe for concurrent use by any number of owners. Close ends it.
type Session struct {
	cli      *clientv3.Client
	cfg      Config
	borrowed *concurrency.Session

	ctx    context.Context // ends when Close begins, cause errs.ErrReleased
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // every goroutine of the session

	mu        sync.Mutex
	closed    bool
	cur       *Lease
	grant     *grantCall
	reserved  map[string]*reservation
	watchers  map[string]*keyWatcher
	listeners map[*func()]struct{} // told of every failed renewal
}

type grantCall struct {
	done chan struct{}
	err  error
}

// NewSession returns a session that grants its own lease on first use. It
// does not contact etcd.
func NewSession(cli *clientv3.Client, cfg Config) *Session {
	return newSession(cli, nil, cfg)
}

// Borrow returns a session that watches the lease of cs, which the caller
// owns: it never revokes it, and cannot replace it once cs is closed.
func Borrow(cs *concurrency.Session, cfg Config) *Session {
	return newSession(cs.Client(), cs, cfg)
}

func newSession(cli *clientv3.Client, cs *concurrency.Session, cfg Config) *Session {
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Hooks == nil {
		cfg.Hooks = &Hooks{}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Session{cli: cli, cfg: cfg, borrowed: cs, ctx: ctx, cancel: cancel}
}

// Settings returns the session-wide configuration.
func (s *Session) Settings() Config { return s.cfg }

// Client is the etcd client the session uses.
func (s *Session) Client() *clientv3.Client { return s.cli }

// IsBorrowed reports whether the lease belongs to a caller's
// concurrency.Session.
func (s *Session) IsBorrowed() bool { return s.borrowed != nil }

// Close ends every hold on the session with ErrReleased, revokes the lease
// the session granted (so every key on it goes at once), and waits for
// every goroutine the session started. A borrowed lease is left to its
// owner. Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	cur := s.cur
	watchers := make([]*keyWatcher, 0, len(s.watchers))
	for _, w := range s.watchers {
		watchers = append(watchers, w)
	}
	s.mu.Unlock()
	s.cancel(errs.ErrReleased)
	for _, w := range watchers {
		w.stopLinger()
	}
	var err error
	if cur != nil {
		cur.cancelHolds() // before the revoke lets the next holders in
	}
	if cur != nil && s.borrowed == nil {
		err = cur.revoke(context.Background(), revokeTimeout)
	}
	s.wg.Wait()
	return err
}

// goBG runs fn in a goroutine Close waits for; false once Close began.
func (s *Session) goBG(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// OnRenewalFailure registers fn to be called after every failed renewal;
// the returned func unregisters it.
func (s *Session) OnRenewalFailure(fn func()) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listeners == nil {
		s.listeners = make(map[*func()]struct{})
	}
	p := &fn
	s.listeners[p] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.listeners, p)
		s.mu.Unlock()
	}
}

func (s *Session) renewalFailed() {
	s.mu.Lock()
	fns := make([]func(), 0, len(s.listeners))
	for p := range s.listeners {
		fns = append(fns, *p)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// lease returns the live lease, granting (or re-checking a borrowed) one if
// there is none. A grant runs once for all callers and is bounded by
// grantCap, not by any caller's ctx: each caller waits only as long as its
// own ctx lives.
func (s *Session) lease(ctx context.Context) (*Lease, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errs.ErrClosed
		}
		if l := s.cur; l != nil && l.ctx.Err() == nil {
			s.mu.Unlock()
			return l, nil
		}
		g := s.grant
		if g == nil {
			g = &grantCall{done: make(chan struct{})}
			s.grant = g
			s.wg.Add(1)
			go s.runGrant(g)
		}
		s.mu.Unlock()
		select {
		case <-g.done:
			if g.err != nil {
				return nil, g.err
			}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (s *Session) runGrant(g *grantCall) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, grantCap)
	l, err := s.newLease(ctx)
	cancel()
	s.mu.Lock()
	switch {
	case err != nil && s.ctx.Err() != nil:
		g.err = errs.ErrClosed
	case err != nil:
		g.err = err
	case s.closed:
		g.err = errs.ErrClosed
		if s.borrowed == nil {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); _ = l.revoke(context.Background(), revokeTimeout) }()
		}
	default:
		s.cur = l
		s.wg.Add(1)
		go l.watchdog()
	}
	s.grant = nil
	s.mu.Unlock()
	close(g.done)
}

// newLease grants a lease, or renews the borrowed one once to learn its
// TTL and a send time.
func (s *Session) newLease(ctx context.Context) (*Lease, error) {
	var id clientv3.LeaseID
	var ttl int64
	var sent time.Time
	if cs := s.borrowed; cs != nil {
		select {
		case <-cs.Done():
			return nil, errs.Lost(errs.ErrSessionClosed)
		default:
		}
		err := retry.Do(ctx, func(ctx context.Context) error {
			sent = s.cfg.Clock.Now()
			resp, err := s.cli.KeepAliveOnce(clientv3.WithRequireLeader(ctx), cs.Lease())
			if err == nil {
				ttl = resp.TTL
			}
			return err
		})
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, errs.Lost(errs.ErrLeaseExpired)
		}
		if err != nil {
			return nil, fmt.Errorf("renew the session's lease: %w", err)
		}
		id = cs.Lease()
		if max := s.cfg.MaxTTL; max > 0 && time.Duration(ttl)*time.Second > max {
			return nil, fmt.Errorf("%w: the session's lease TTL is %v, at most %v allowed (WithMaxTTL)", errs.ErrInvalid, time.Duration(ttl)*time.Second, max)
		}
	} else {
		// An unanswered grant leaves at most a lease with no keys, which
		// expires by itself: safe to retry.
		err := retry.Do(ctx, func(ctx context.Context) error {
			sent = s.cfg.Clock.Now()
			resp, err := s.cli.Grant(clientv3.WithRequireLeader(ctx), int64(s.cfg.TTL/time.Second))
			if err == nil {
				id, ttl = resp.ID, resp.TTL
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("grant lease: %w", err)
		}
	}
	d := time.Duration(ttl) * time.Second
	margin := s.cfg.Margin
	if margin == 0 {
		margin = DefaultMargin(d)
	}
	if margin > d/2 {
		return nil, fmt.Errorf("%w: safety margin %v must be at most half the lease's TTL %v", errs.ErrInvalid, margin, d)
	}
	lctx, cancel := context.WithCancelCause(s.ctx)
	l := &Lease{s: s, id: id, ttl: d, margin: margin, ctx: lctx, cancel: cancel}
	l.extend(sent, d)
	return l, nil
}

// DefaultMargin is the safety margin used when none is set: a fifth of the
// TTL, which covers a client clock running up to 20% slow.
func DefaultMargin(ttl time.Duration) time.Duration { return ttl / 5 }
