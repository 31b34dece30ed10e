// Package core is baton's sessions, queues and holds, shared by every
// primitive; docs/design.md walks through it file by file.
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
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/memo"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
	"github.com/batonhq/baton/internal/watch"
)

// Bounds and defaults of the session settings.
const (
	DefaultTTL    = 15 * time.Second
	MinTTL        = 2 * time.Second // etcd's minimum lease TTL with default timing
	DefaultMaxTTL = 5 * time.Minute
	grantCap      = 10 * time.Second // bounds one lease grant
	revokeTimeout = 2 * time.Second  // bounds Close's revoke and its wait for deletions
)

// Config is the session-wide configuration.
type Config struct {
	TTL, MaxTTL, Margin      time.Duration // Margin: taken off the validity deadline; zero picks TTL/5
	MaxHeld                  int
	Logger                   *zap.Logger
	Registerer               prometheus.Registerer
	MetricLabelLimit         int // bounds the Registerer's default labels (metrics.Label)
	Clock                    lease.Clock
	Hooks                    *Hooks
	TracerProvider           trace.TracerProvider // every primitive's spans (nil: the global provider); Untraced: none
	Untraced, KeysToDeadline bool                 // KeysToDeadline: lease.Config's
}

// Session is one etcd lease at a time (granted here, or a caller's etcd
// session's), its validity watchdog, the key reservations of this process
// and one watch stream. Close ends it.
type Session struct {
	cli    *clientv3.Client
	cfg    Config
	tracer trace.Tracer         // nil: untraced
	etcd   *concurrency.Session // the caller's lease, or nil: granted here
	prev   *Session             // cs's Session before this one, whose deletions may still run
	lcfg   *lease.Config

	ctx    context.Context // ends with errs.ErrReleased when Close begins
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // watchdog, grants, watches, enqueue groups: Close waits for them
	enq    *queue.Batcher // groups the enqueues sent at once
	dels   sync.WaitGroup // background deletions: Close waits a bounded time

	doneOnce sync.Once
	done     <-chan struct{}

	mu        sync.Mutex
	closed    bool
	etcdGone  bool // the caller's lease was found gone: never replaced
	users     int  // primitives attached to an etcd session's Session
	cur       *Lease
	grant     *grantCall
	reserved  map[string]*reservation
	stream    *watch.Stream[*Hold] // every key held or waited for
	listeners map[*func()]struct{} // told of every failed renewal
	memo.Memo                      // what every primitive on it builds alike
}

type grantCall struct {
	done chan struct{}
	err  error
}

// NewSession returns a session that grants its own lease on first use. It
// does not contact etcd.
func NewSession(cli *clientv3.Client, cfg Config) *Session { return newSession(cli, nil, cfg) }

func newSession(cli *clientv3.Client, cs *concurrency.Session, cfg Config) *Session {
	if cfg.Clock == nil {
		cfg.Clock = lease.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Hooks == nil {
		cfg.Hooks = &Hooks{}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{cli: cli, cfg: cfg, etcd: cs, ctx: ctx, cancel: cancel}
	s.enq = queue.NewBatcher(cli, ctx, func(fn func()) bool { return s.goIn(&s.wg, fn) })
	s.stream = watch.New(&watch.Config[*Hold]{Client: cli, Ctx: ctx, Go: func(fn func()) bool { return s.goIn(&s.wg, fn) },
		Key: func(h *Hold) string { return h.key }, Rev: func(h *Hold) int64 { return h.rev }, Gone: (*Hold).gone, Hooks: &cfg.Hooks.Stream})
	if !cfg.Untraced {
		s.tracer = telemetry.Tracer(cfg.TracerProvider)
	}
	s.lcfg = &lease.Config{Client: cli, Clock: cfg.Clock, Logger: cfg.Logger, Granted: cs == nil, KeysToDeadline: cfg.KeysToDeadline,
		OnRenewed: func() { call(s.cfg.Hooks.OnRenewed) }, OnFailure: s.renewalFailed}
	if cs != nil {
		s.lcfg.EtcdDone = cs.Done()
	}
	return s
}

// attached is the one Session of each etcd session in use (docs/design.md
// says why): an entry lives from the first Attach to the last Detach.
var attached = struct {
	sync.Mutex
	m        map[*concurrency.Session]*Session
	draining map[*concurrency.Session]*Session // detached, with keys still being deleted
}{m: make(map[*concurrency.Session]*Session), draining: make(map[*concurrency.Session]*Session)}

// Attach returns the Session of cs, made with cfg by the first caller; the
// caller must Detach it. created says whether cfg was used.
func Attach(cs *concurrency.Session, cfg Config) (s *Session, created bool) {
	attached.Lock()
	defer attached.Unlock()
	if s := attached.m[cs]; s != nil {
		s.mu.Lock()
		s.users++
		s.mu.Unlock()
		return s, false
	}
	s = newSession(cs.Client(), cs, cfg)
	s.users = 1
	s.prev = attached.draining[cs] // its keys are reserved until deleted
	delete(attached.draining, cs)
	attached.m[cs] = s
	return s, true
}

// Detach ends one use of an attached Session; the last one closes it.
func (s *Session) Detach() error {
	attached.Lock()
	s.mu.Lock()
	s.users--
	last := s.users == 0
	pending := len(s.reserved) > 0
	s.mu.Unlock()
	if last && attached.m[s.etcd] == s {
		delete(attached.m, s.etcd)
		if pending {
			attached.draining[s.etcd] = s
		}
	}
	attached.Unlock()
	if last {
		return s.Close()
	}
	return nil
}

// Settings returns the session-wide configuration.
func (s *Session) Settings() Config { return s.cfg }

// Client is the etcd client the session uses.
func (s *Session) Client() *clientv3.Client { return s.cli }

// IsBorrowed reports whether the lease belongs to a caller's etcd session.
func (s *Session) IsBorrowed() bool { return s.etcd != nil }

// Done is closed when the session is closed or its etcd session ended.
func (s *Session) Done() <-chan struct{} {
	if s.etcd == nil {
		return s.ctx.Done()
	}
	s.doneOnce.Do(func() {
		ctx, cancel := context.WithCancel(s.ctx)
		stop := context.AfterFunc(s.etcd.Ctx(), cancel)
		s.done = ctx.Done()
		go func() { // the etcd session's lease may end without its Ctx
			select {
			case <-s.etcd.Done():
			case <-ctx.Done():
			}
			stop()
			cancel()
		}()
	})
	return s.done
}

// LeaseID is the current lease, or clientv3.NoLease before the first grant.
func (s *Session) LeaseID() clientv3.LeaseID {
	if s.etcd != nil {
		return s.etcd.Lease()
	} else if l := s.Current(); l != nil {
		return l.ID()
	}
	return clientv3.NoLease
}

// Current is the current lease, live or lost; nil before the first grant.
func (s *Session) Current() *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Close ends every hold before it revokes a granted lease (a caller's is
// left to its owner) and waits for the session's goroutines, and at most
// revokeTimeout for deletions on a caller's lease. Idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	cur := s.cur
	s.mu.Unlock()
	s.stream.StopLinger() // not under s.mu: a Register holds the stream's lock while it starts a goroutine here
	s.cancel(errs.ErrReleased)
	var err error
	if cur != nil {
		if !planted.On("b") {
			cur.cancelHolds(context.Cause(cur.Context())) // before the revoke lets the next holders in
		}
		if s.etcd == nil {
			err = cur.Revoke(context.Background(), revokeTimeout)
		}
		if planted.On("b") {
			cur.cancelHolds(context.Cause(cur.Context()))
		}
	}
	s.wg.Wait()
	done := make(chan struct{})
	go func() { s.dels.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(revokeTimeout):
	}
	return err
}

// goIn runs fn in a goroutine counted by wg (s.wg: Close waits for it;
// s.dels: only briefly); false once Close began.
func (s *Session) goIn(wg *sync.WaitGroup, fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	wg.Add(1)
	go func() { defer wg.Done(); fn() }()
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
	if l := s.cur; l != nil {
		defer l.renewalFailed() // the spans of its holds, after the listeners
	}
	fns := make([]func(), 0, len(s.listeners))
	for p := range s.listeners {
		fns = append(fns, *p)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Lease returns the live lease, granting one (or re-checking a caller's):
// one grant for all callers, each waiting as long as its own ctx lives.
func (s *Session) Lease(ctx context.Context) (*Lease, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errs.ErrClosed
		}
		if l := s.cur; l != nil && l.Context().Err() == nil {
			s.mu.Unlock()
			return l, nil
		}
		if s.etcdGone || (s.etcd != nil && s.etcd.Ctx().Err() != nil) { // closed or orphaned
			s.mu.Unlock()
			return nil, errs.Lost(errs.ErrSessionClosed)
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
	case err != nil && s.ctx.Err() != nil, err == nil && s.closed:
		g.err = errs.ErrClosed
		if err == nil && s.etcd == nil {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); _ = l.Revoke(context.Background(), revokeTimeout) }()
		}
	case err != nil:
		g.err = err
	default:
		s.cur = l
		s.wg.Add(1)
		go func() { defer s.wg.Done(); l.Watchdog(s.ctx) }()
	}
	s.grant = nil
	s.mu.Unlock()
	close(g.done)
}

// newLease grants a lease (retried: an unanswered grant leaves an empty
// lease that expires), or renews a caller's once to learn its TTL.
func (s *Session) newLease(ctx context.Context) (*Lease, error) {
	var id clientv3.LeaseID
	var ttl int64
	var sent time.Time
	err := retry.Do(ctx, func(ctx context.Context) error {
		sent = s.cfg.Clock.Now()
		if s.etcd != nil {
			if s.etcd.Ctx().Err() != nil {
				return errs.Lost(errs.ErrSessionClosed)
			}
			resp, err := s.cli.KeepAliveOnce(clientv3.WithRequireLeader(ctx), s.etcd.Lease())
			if err == nil {
				id, ttl = s.etcd.Lease(), resp.TTL
			}
			return err
		}
		resp, err := s.cli.Grant(clientv3.WithRequireLeader(ctx), int64(s.cfg.TTL/time.Second))
		if err == nil {
			id, ttl = resp.ID, resp.TTL
		}
		return err
	})
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.mu.Lock()
		s.etcdGone = true
		s.mu.Unlock()
		return nil, errs.Lost(errs.ErrSessionClosed)
	case err != nil && s.etcd != nil:
		return nil, fmt.Errorf("renew the session's lease: %w", err)
	case err != nil:
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	d := time.Duration(ttl) * time.Second
	if max := s.cfg.MaxTTL; s.etcd != nil && max > 0 && d > max {
		return nil, fmt.Errorf("%w: the session's lease TTL is %v, at most %v allowed (WithMaxTTL)", errs.ErrInvalid, d, max)
	}
	l := &Lease{s: s}
	if l.Lease, err = lease.New(s.ctx, s.lcfg, id, d, s.cfg.Margin, sent, l.cancelHolds); err != nil {
		return nil, err
	}
	return l, nil
}

// Lease is one lease of the session (its watchdog is package lease's) and
// the holds it ends: one list through the holds, not a context child (and
// ~150 bytes) nor a map entry per key.
type Lease struct {
	*lease.Lease
	Fence   queue.Fence // voids this lease's unheard enqueues
	s       *Session
	holdsMu sync.Mutex
	holds   *Hold // the armed holds not ended, linked through prev and next
	watched bool  // endHolds runs when the lease ends
}

// add and remove link h into l.holds and out; l.holdsMu is held.
func (l *Lease) add(h *Hold) {
	h.prev, h.next = nil, l.holds
	if l.holds != nil {
		l.holds.prev = h
	}
	l.holds = h
}

func (l *Lease) remove(h *Hold) {
	switch {
	case h.prev != nil:
		h.prev.next = h.next
	case l.holds == h:
		l.holds = h.next
	default:
		return // not linked
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.prev, h.next = nil, nil
}

// renewalFailed tells the recorded spans of l's holds.
func (l *Lease) renewalFailed() {
	l.holdsMu.Lock()
	defer l.holdsMu.Unlock()
	for h := l.holds; h != nil; h = h.next {
		h.span().RenewalFailed(nil)
	}
}

// cancelHolds ends every hold's context with the lease's cause in the
// caller, so holders know before anything lets the next holder in.
func (l *Lease) cancelHolds(cause error) {
	l.holdsMu.Lock()
	defer l.holdsMu.Unlock()
	for h := l.holds; h != nil; h = h.next {
		h.cancel(cause) // no effect on a hold that ended first
	}
}

// endHolds runs every hold's end once the lease ended; a hold whose key was
// deleted first ends once the reason is told apart.
func (l *Lease) endHolds() {
	if planted.On("b") {
		time.Sleep(2 * l.TTL()) // after the revoke had its chance
	}
	call(l.s.cfg.Hooks.EndingHolds)
	l.holdsMu.Lock()
	var holds []*Hold
	for h := l.holds; h != nil; h = h.next {
		holds = append(holds, h)
	}
	l.holdsMu.Unlock()
	if len(holds) > 0 {
		l.s.stream.Reset() // their watches go with the stream, not one cancel each
	}
	for _, h := range holds {
		h.cancel(context.Cause(l.Context()))
		if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
			go h.end(cause)
		}
	}
}

// errReserved is returned by a try reservation of a key in use here.
var errReserved = errors.New("key in use by another caller of this session")

// reservation is one key claimed in this process, so two callers locking
// one name through one lease never share its key.
type reservation struct {
	key   string        // "" once freed; guarded by s.mu
	hold  *Hold         // the hold on the key, once there is one; guarded by s.mu
	freed chan struct{} // made by the first waiter; guarded by s.mu
}

// reserve claims key until the reservation is freed, waiting while another
// caller has it (errReserved with try). With takeover, a key whose hold is
// armed and live is taken from it at once (it ends with errs.ErrReplaced).
func (s *Session) reserve(ctx context.Context, key string, try, takeover bool) (*reservation, error) {
	for p := s.prev; p != nil; p = p.prev {
		if err := p.waitFreed(ctx, key); err != nil {
			return nil, err
		}
	}
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
			r := &reservation{key: key}
			s.reserved[key] = r
			s.mu.Unlock()
			return r, nil
		}
		if old := busy.hold; takeover && old != nil && old.ctx.Err() == nil { // an ended term's key is deleted first
			busy.hold = nil
			s.mu.Unlock()
			if !planted.On("e") {
				old.replaced()
			}
			return busy, nil
		}
		if try {
			s.mu.Unlock()
			return nil, errReserved
		}
		if err := s.awaitFree(ctx, busy); err != nil {
			return nil, err
		}
	}
}

// waitFreed waits until key is not reserved here.
func (s *Session) waitFreed(ctx context.Context, key string) error {
	s.mu.Lock()
	if r := s.reserved[key]; r != nil {
		return s.awaitFree(ctx, r)
	}
	s.mu.Unlock()
	return nil
}

// awaitFree unlocks s.mu, held by the caller, and waits until r is freed.
func (s *Session) awaitFree(ctx context.Context, r *reservation) error {
	if r.freed == nil {
		r.freed = make(chan struct{}) // only a waiter pays for one
	}
	freed := r.freed
	s.mu.Unlock()
	select {
	case <-freed:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// setHold records h as r's holder, for a takeover to find.
func (s *Session) setHold(r *reservation, h *Hold) {
	s.mu.Lock()
	if r.key != "" {
		r.hold = h
	}
	s.mu.Unlock()
}

// dropHold forgets h as r's holder; false if it was not (a takeover got r).
func (s *Session) dropHold(r *reservation, h *Hold) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	mine := r.hold == h && r.key != ""
	if mine {
		r.hold = nil
	}
	return mine
}

// free ends the reservation r if h (nil: whoever) still has it.
func (s *Session) free(r *reservation, h *Hold) {
	s.mu.Lock()
	if r.key == "" || (h != nil && r.hold != h) {
		s.mu.Unlock()
		return
	}
	if s.reserved[r.key] == r {
		delete(s.reserved, r.key)
	}
	r.key, r.hold = "", nil
	if r.freed != nil {
		close(r.freed)
	}
	drained := s.closed && s.etcd != nil && len(s.reserved) == 0
	s.mu.Unlock()
	if drained {
		attached.Lock()
		if attached.draining[s.etcd] == s {
			delete(attached.draining, s.etcd)
		}
		attached.Unlock()
	}
}
