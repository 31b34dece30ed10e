// Package core is baton's one implementation of sessions, queues and holds,
// shared by mutex, election, semaphore and rwmutex. docs/design.md walks
// through it file by file.
package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
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

// Session is one etcd lease at a time (granted here, or a caller's etcd
// session's), its validity watchdog, the key reservations of this process
// and one deletion watch per namespace. Close ends it.
type Session struct {
	cli  *clientv3.Client
	cfg  Config
	etcd *concurrency.Session // the caller's lease, or nil: granted here

	ctx    context.Context // ends with errs.ErrReleased when Close begins
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // watchdog, grants, watches: Close waits for them
	dels   sync.WaitGroup // background deletions: Close waits a bounded time

	mu        sync.Mutex
	closed    bool
	etcdGone  bool // the caller's lease was found gone: never replaced
	users     int  // primitives attached to an etcd session's Session
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
func NewSession(cli *clientv3.Client, cfg Config) *Session { return newSession(cli, nil, cfg) }

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
	return &Session{cli: cli, cfg: cfg, etcd: cs, ctx: ctx, cancel: cancel}
}

// attached is the one Session of each etcd session in use: an etcd
// *concurrency.Session cannot carry baton's state, and every primitive on
// one lease must share one reservation table, watchdog and watch. An entry
// lives while a primitive uses it (Attach to Detach), no longer.
var attached = struct {
	sync.Mutex
	m map[*concurrency.Session]*Session
}{m: make(map[*concurrency.Session]*Session)}

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
	attached.m[cs] = s
	return s, true
}

// Detach ends one use of an attached Session; the last one closes it.
func (s *Session) Detach() error {
	attached.Lock()
	s.mu.Lock()
	s.users--
	last := s.users == 0
	s.mu.Unlock()
	if last && attached.m[s.etcd] == s {
		delete(attached.m, s.etcd)
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
	if s.etcd != nil {
		return mergeDone(s.ctx, s.etcd.Done())
	}
	return s.ctx.Done()
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func mergeDone(ctx context.Context, other <-chan struct{}) <-chan struct{} {
	select {
	case <-other:
		return other
	default:
	}
	if ctx.Err() != nil {
		return ctx.Done()
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-other:
		}
		close(done)
	}()
	return done
}

// LeaseID is the current lease, or clientv3.NoLease before the first grant.
func (s *Session) LeaseID() clientv3.LeaseID {
	if s.etcd != nil {
		return s.etcd.Lease()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return clientv3.NoLease
	}
	return s.cur.id
}

// Close ends every hold with errs.ErrReleased before it revokes a granted
// lease (a caller's is left to its owner), waits for the session's
// goroutines, and waits up to revokeTimeout for deletions still under way
// on a caller's lease; those go on until they succeed or that lease ends.
// Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	cur := s.cur
	for _, w := range s.watchers {
		w.stopLinger()
	}
	s.mu.Unlock()
	s.cancel(errs.ErrReleased)
	var err error
	if cur != nil {
		cur.cancelHolds() // before the revoke lets the next holders in
		if s.etcd == nil {
			err = cur.revoke(context.Background(), revokeTimeout)
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

// goDelete runs a deletion that Close waits for only briefly; false once
// Close began (the caller runs it inline then).
func (s *Session) goDelete(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.dels.Add(1)
	go func() { defer s.dels.Done(); fn() }()
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

// lease returns the live lease, granting one (or checking a caller's) if
// there is none. One grant, bounded by grantCap, runs for all callers; each
// waits only as long as its own ctx lives. A caller's lease, once lost, is
// never replaced: lease returns ErrSessionClosed from then on.
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
		if s.etcdGone || (s.etcd != nil && isDone(s.etcd.Done())) {
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
			go func() { defer s.wg.Done(); _ = l.revoke(context.Background(), revokeTimeout) }()
		}
	case err != nil:
		g.err = err
	default:
		s.cur = l
		s.wg.Add(1)
		go l.watchdog()
	}
	s.grant = nil
	s.mu.Unlock()
	close(g.done)
}

// newLease grants a lease, or renews a caller's once to learn its TTL and a
// send time; an unanswered grant leaves at most an empty lease, which
// expires by itself.
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

// DefaultMargin is a fifth of the TTL, which covers a client clock running
// up to 20% slow.
func DefaultMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// Lease is one lease of a session and its validity watchdog. Its context
// ends with a loss (errs.ErrLost and a reason) when ownership through it may
// be gone, or with errs.ErrReleased when the session closes.
type Lease struct {
	s      *Session
	id     clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	timer    Timer

	// The lease ends its holds itself: one set, not a context child (and
	// ~150 bytes) per held key.
	holdsMu sync.Mutex
	holds   map[*Hold]struct{}
}

// ID is the lease ID.
func (l *Lease) ID() clientv3.LeaseID { return l.id }

// TTL is the TTL the server granted.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Context ends when ownership through the lease may be gone.
func (l *Lease) Context() context.Context { return l.ctx }

// Deadline is the current validity deadline.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *Lease) hex() zap.Field { return zap.String("lease", fmt.Sprintf("%x", int64(l.id))) }

// cancelHolds ends every hold's context with the lease's cause in the
// caller, so holders know before anything lets the next holder in.
func (l *Lease) cancelHolds() {
	cause := context.Cause(l.ctx)
	l.holdsMu.Lock()
	defer l.holdsMu.Unlock()
	for h := range l.holds {
		h.cancel(cause) // no effect on a hold that ended first
	}
}

// endHolds runs every hold's end once the lease ended; a hold whose key was
// deleted first ends once the reason is told apart.
func (l *Lease) endHolds() {
	call(l.s.cfg.Hooks.EndingHolds)
	l.holdsMu.Lock()
	holds := make([]*Hold, 0, len(l.holds))
	for h := range l.holds {
		holds = append(holds, h)
	}
	l.holdsMu.Unlock()
	for _, h := range holds {
		h.cancel(context.Cause(l.ctx))
		if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
			go h.end(cause)
		}
	}
}

// lose ends the lease with a loss (no effect once it ended).
func (l *Lease) lose(reason error) {
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	cause := errs.Lost(reason)
	l.cancel(cause)
	l.mu.Unlock()
	l.cancelHolds()
	l.s.cfg.Logger.Warn("lease lost", l.hex(), zap.Error(cause))
}

// extend moves the validity deadline to sent + ttl − margin.
func (l *Lease) extend(sent time.Time, ttl time.Duration) {
	clock := l.s.cfg.Clock
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := sent.Add(ttl - l.margin)
	if l.ctx.Err() != nil || deadline.Before(l.deadline) {
		return
	}
	l.deadline = deadline
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = clock.AfterFunc(deadline.Sub(clock.Now()), func() {
		l.mu.Lock()
		due := !clock.Now().Before(l.deadline)
		l.mu.Unlock()
		if due {
			l.lose(errs.ErrValidityExpired)
		}
	})
}

// watchdog renews every TTL/3, each attempt bounded by TTL/6 and retried at
// once after a failure, so two failures fit inside the validity deadline.
// After a loss it revokes a granted lease for up to twice the TTL: a healed
// partition or a new etcd leader would otherwise keep its keys in the queue.
func (l *Lease) watchdog() {
	defer l.s.wg.Done()
	s := l.s
	var etcdDone <-chan struct{}
	if s.etcd != nil {
		etcdDone = s.etcd.Done()
	}
	interval, attempt := l.ttl/3, l.ttl/6
	wait, failures := interval, 0
	for l.ctx.Err() == nil {
		if !l.sleep(wait, etcdDone) {
			break
		}
		sent := s.cfg.Clock.Now()
		ctx, cancel := context.WithTimeout(l.ctx, attempt)
		resp, err := s.cli.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case l.ctx.Err() != nil:
		case err == nil:
			failures, wait = 0, interval
			l.extend(sent, time.Duration(resp.TTL)*time.Second)
			call(s.cfg.Hooks.OnRenewed)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.lose(errs.ErrLeaseExpired)
		default:
			failures, wait = failures+1, 0
			s.renewalFailed()
			if failures >= 2 {
				l.lose(errs.ErrRenewalFailed)
			} else {
				s.cfg.Logger.Info("lease renewal failed", l.hex(), zap.Error(err))
			}
		}
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.cancelHolds() // the lease may have ended in another goroutine
	if s.etcd == nil && !errors.Is(context.Cause(l.ctx), errs.ErrReleased) {
		if err := l.revoke(s.ctx, 2*l.ttl); err != nil {
			s.cfg.Logger.Warn("could not revoke a lost lease; it expires by itself", l.hex(), zap.Error(err))
		}
	}
}

// sleep waits d on the session's clock; false when the lease ended.
func (l *Lease) sleep(d time.Duration, etcdDone <-chan struct{}) bool {
	if d <= 0 {
		return l.ctx.Err() == nil
	}
	fired := make(chan struct{})
	t := l.s.cfg.Clock.AfterFunc(d, func() { close(fired) })
	defer t.Stop()
	select {
	case <-fired:
		return l.ctx.Err() == nil
	case <-l.ctx.Done():
	case <-etcdDone:
		l.lose(errs.ErrSessionClosed)
	}
	return false
}

// revoke revokes the lease, retrying for up to d while stop lives, then
// once more briefly if stop ended first.
func (l *Lease) revoke(stop context.Context, d time.Duration) error {
	op := func(ctx context.Context) error {
		_, err := l.s.cli.Revoke(clientv3.WithRequireLeader(ctx), l.id)
		return err
	}
	ctx, cancel := context.WithTimeout(stop, d)
	err := retry.Do(ctx, op)
	cancel()
	if err != nil && stop.Err() != nil && !retry.Permanent(err) {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		err = retry.Do(ctx, op)
		cancel()
	}
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease %x: %w", int64(l.id), err)
	}
	return nil
}

// gone reports whether the lease no longer exists on the server; false
// when it cannot tell.
func (l *Lease) gone(ctx context.Context) bool {
	if errors.Is(context.Cause(l.ctx), errs.ErrLeaseExpired) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := l.s.cli.TimeToLive(ctx, l.id)
	if err != nil {
		return errors.Is(err, rpctypes.ErrLeaseNotFound)
	}
	return resp.TTL <= 0
}

// errReserved is returned by a try reservation of a key in use here.
var errReserved = errors.New("key in use by another caller of this session")

// reservation is one key claimed in this process: keys are named after the
// lease, so without it two callers locking one name through one lease would
// share a key. It costs every lock held, so it is small: key is emptied
// when freed.
type reservation struct {
	s     *Session
	key   string        // "" once freed; guarded by s.mu
	hold  *Hold         // the hold on the key, once there is one; guarded by s.mu
	freed chan struct{} // made by the first waiter; guarded by s.mu
}

// reserve claims key until the reservation is freed, waiting while another
// caller has it (errReserved with try). With takeover, a key whose holder
// is armed is taken from it at once: that hold ends with errs.ErrReplaced.
func (s *Session) reserve(ctx context.Context, key string, try, takeover bool) (*reservation, error) {
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
		if old := busy.hold; takeover && old != nil {
			busy.hold = nil
			s.mu.Unlock()
			old.replaced()
			return busy, nil
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

// setHold records h as the key's holder, for a takeover to find.
func (r *reservation) setHold(h *Hold) {
	r.s.mu.Lock()
	if r.key != "" {
		r.hold = h
	}
	r.s.mu.Unlock()
}

// free ends the reservation if h (nil: whoever) still has it.
func (r *reservation) free(h *Hold) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.key == "" || (h != nil && r.hold != h) {
		return
	}
	if r.s.reserved[r.key] == r {
		delete(r.s.reserved, r.key)
	}
	r.key, r.hold = "", nil
	if r.freed != nil {
		close(r.freed)
	}
}

// keyWatcher tells the holds of one session under one namespace when their
// keys are deleted: one watch for every key held. A key is registered after
// its acquisition confirmed it at revision h.at; a deletion after that must
// reach the hold whatever the stream was doing, so a key the stream may not
// cover (stream started or re-read after at, key not expected) is read once.
type keyWatcher struct {
	s      *Session
	prefix string
	cancel context.CancelFunc

	mu       sync.Mutex
	keys     map[string]*Hold
	expected map[string]int64 // keys being acquired: a deletion seen is kept
	from     int64            // first revision the current stream delivers
	linger   *time.Timer      // stops an idle watch later
	uses     int
}

func (s *Session) watcher(key string) *keyWatcher {
	prefix := keys.NamespaceOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = make(map[string]*keyWatcher)
	}
	w, ok := s.watchers[prefix]
	if !ok {
		w = &keyWatcher{s: s, prefix: prefix, keys: make(map[string]*Hold), expected: make(map[string]int64)}
		s.watchers[prefix] = w
	}
	return w
}

// expect marks key as being acquired, before the confirming read.
func (w *keyWatcher) expect(key string) {
	w.mu.Lock()
	if w.cancel != nil {
		w.expected[key] = 0
	}
	w.mu.Unlock()
}

func (w *keyWatcher) unexpect(key string) {
	w.mu.Lock()
	delete(w.expected, key)
	w.mu.Unlock()
}

// register ends h (once) when its key, created at h.rev and confirmed at
// h.at, is deleted.
func (w *keyWatcher) register(h *Hold) {
	key := h.key
	w.mu.Lock()
	deletedAt, wasExpected := w.expected[key]
	delete(w.expected, key)
	w.keys[key] = h
	w.uses++
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	check := false
	switch {
	case w.cancel == nil:
		w.start(h.at + 1)
	case deletedAt > h.rev:
		delete(w.keys, key)
		w.mu.Unlock()
		h.gone()
		return
	case !wasExpected || w.from > h.at+1:
		check = true
	}
	w.mu.Unlock()
	if check {
		w.checkOnce(h)
	}
}

// unregister stops the news of h's key; the watch lingers a TTL after the
// last key when the session holds again and again, and stops at once after
// a single hold so that drained waiters stop receiving the namespace.
func (w *keyWatcher) unregister(h *Hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[h.key] == h {
		delete(w.keys, h.key)
	}
	switch {
	case len(w.keys) > 0 || len(w.expected) > 0 || w.cancel == nil || w.linger != nil:
	case w.uses < 2:
		w.cancel()
		w.cancel = nil
	default:
		w.linger = time.AfterFunc(DefaultTTL, func() { w.stopIfIdle() })
	}
}

func (w *keyWatcher) stopLinger() {
	w.mu.Lock()
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	w.mu.Unlock()
}

// stopIfIdle ends the watch when no key is held or expected.
func (w *keyWatcher) stopIfIdle() bool {
	w.stopLinger()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keys) > 0 || len(w.expected) > 0 || w.cancel == nil {
		return false
	}
	w.cancel()
	w.cancel = nil
	return true
}

// start runs the watch loop from revision from; w.mu is held.
func (w *keyWatcher) start(from int64) {
	w.s.mu.Lock()
	closed := w.s.closed
	if !closed {
		w.s.wg.Add(1)
	}
	w.s.mu.Unlock()
	if closed {
		return
	}
	ctx, cancel := context.WithCancel(w.s.ctx)
	w.cancel, w.from = cancel, from
	go func() {
		defer w.s.wg.Done()
		w.loop(ctx, from)
	}()
}

// loop watches from the current revision, which etcd serves at once (a past
// one waits up to 100 ms in its unsynced set), reading once to cover any
// gap since from; after a broken stream it reads what is held and resumes.
func (w *keyWatcher) loop(ctx context.Context, from int64) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range w.s.cli.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created && wr.Header.Revision >= from {
				if _, ok := w.reread(ctx); !ok {
					break
				}
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					w.deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
				}
			}
		}
		cancel()
		if ctx.Err() != nil || w.stopIfIdle() {
			return
		}
		call(w.s.cfg.Hooks.BeforeReread)
		rev, ok := w.reread(ctx)
		if !ok {
			if retry.Sleep(ctx, 100*time.Millisecond) != nil || w.stopIfIdle() {
				return
			}
			continue
		}
		from = rev + 1
	}
}

// deleted ends the hold of key in this goroutine, if the key was created
// before the deletion.
func (w *keyWatcher) deleted(key string, at int64) {
	w.mu.Lock()
	if _, ok := w.expected[key]; ok {
		w.expected[key] = at
	}
	h, ok := w.keys[key]
	ok = ok && at > h.rev // an older deletion is of an earlier holder of this key
	if ok {
		delete(w.keys, key)
	}
	w.mu.Unlock()
	if ok {
		h.gone()
	}
	if f := w.s.cfg.Hooks.Deleted; f != nil {
		f(key)
	}
}

// reread reads the namespace's keys and ends the holds registered before
// the read whose keys are gone; it returns the revision read at.
func (w *keyWatcher) reread(ctx context.Context) (int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := w.s.cli.Get(rctx, w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return 0, false
	}
	rev := resp.Header.Revision
	present := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv.CreateRevision
	}
	var gone []*Hold
	w.mu.Lock()
	for k, h := range w.keys {
		if h.at < rev && present[k] != h.rev {
			delete(w.keys, k)
			gone = append(gone, h)
		}
	}
	clear(w.expected) // their registration reads them
	w.from = rev + 1
	w.mu.Unlock()
	for _, h := range gone {
		h.gone()
	}
	return rev, true
}

// checkOnce reads h's key (a few attempts) and ends h if it is gone.
func (w *keyWatcher) checkOnce(h *Hold) {
	for range 3 {
		ctx, cancel := context.WithTimeout(w.s.ctx, 2*time.Second)
		resp, err := w.s.cli.Get(ctx, h.key, clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == h.rev {
			return
		}
		w.mu.Lock()
		mine := w.keys[h.key] == h
		if mine {
			delete(w.keys, h.key)
		}
		w.mu.Unlock()
		if mine {
			h.gone()
		}
		return
	}
}
