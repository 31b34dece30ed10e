// Package lease keeps one etcd lease alive and says, on a context, the
// moment ownership through it may be gone.
//
// The validity deadline is the send time of the last renewal the server
// acknowledged, plus the TTL the server granted, minus a safety margin, on
// the monotonic clock. The server cannot expire the lease before that send
// time plus the TTL, because it restarted the TTL no earlier than when it
// received the renewal. etcd's own Session measures from when replies
// arrive and checks about once a second, which is why it can learn of a
// loss after another holder already acquired.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/retry"
)

// ErrReserved is returned by a Reserve with try when another caller in this
// process has the key.
var ErrReserved = errors.New("key in use by another caller of this session")

// Config configures a Session.
type Config struct {
	// TTL requested for an owned lease; ignored for a borrowed session.
	TTL time.Duration
	// MaxTTL rejects a borrowed session whose lease is longer.
	MaxTTL time.Duration
	// Margin is subtracted from the validity deadline. Zero picks TTL/5.
	Margin time.Duration
	Clock  Clock
	Logger *zap.Logger
	// OnRenewalFailure is called for every failed renewal attempt.
	OnRenewalFailure func()
	// OnRenewed is called after each acknowledged renewal with its send
	// time; tests use it to wait for renewals.
	OnRenewed func(sent time.Time)
}

// Session is a lease with a validity watchdog. It owns the lease when made
// by Grant, and only watches it when made by Borrow.
type Session struct {
	cli    *clientv3.Client
	cs     *concurrency.Session
	owned  bool
	id     clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration
	cfg    Config

	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	deadline time.Time
	timer    Timer
	closed   bool
	reserved map[string]chan struct{}
	refs     int                    // users of a shared borrowed watchdog
	watchers map[string]*keyWatcher // by namespace prefix
}

const (
	// grantCap bounds the lease grant when the caller's context has no deadline.
	grantCap = 10 * time.Second
	// revokeTimeout bounds the revoke on Close; an unrevoked lease expires anyway.
	revokeTimeout = 2 * time.Second
)

// Grant creates a lease with the configured TTL and a concurrency.Session on
// it whose keepalive is this watchdog's renewal loop, so that the session's
// Done closes exactly when the watchdog declares the lease lost.
func Grant(ctx context.Context, cli *clientv3.Client, cfg Config) (*Session, error) {
	gctx, cancel := context.WithTimeout(ctx, grantCap)
	defer cancel()
	cfg = withDefaults(cfg)
	// An unanswered grant leaves at most a lease with no keys, which
	// expires by itself: safe to retry.
	var resp *clientv3.LeaseGrantResponse
	var sent time.Time
	err := retry.Do(gctx, func(ctx context.Context) (err error) {
		sent = cfg.Clock.Now()
		resp, err = cli.Grant(clientv3.WithRequireLeader(ctx), int64(cfg.TTL/time.Second))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	s := newSession(cli, resp.ID, time.Duration(resp.TTL)*time.Second, cfg)
	s.owned, s.refs = true, 1

	wrapped := clientv3.NewCtxClient(context.Background(), clientv3.WithZapLogger(cli.GetLogger()))
	wrapped.KV, wrapped.Watcher, wrapped.Cluster = cli.KV, cli.Watcher, cli.Cluster
	wrapped.Auth, wrapped.Maintenance = cli.Auth, cli.Maintenance
	wrapped.Lease = &keeper{Lease: cli.Lease, s: s}
	cs, err := concurrency.NewSession(wrapped,
		concurrency.WithLease(resp.ID),
		concurrency.WithTTL(int(resp.TTL)),
		concurrency.WithContext(context.Background()))
	if err != nil {
		s.cancel(errs.ErrReleased)
		_ = s.revokeWithin(context.Background(), revokeTimeout)
		return nil, fmt.Errorf("start session: %w", err)
	}
	s.cs = cs
	s.start(sent)
	return s, nil
}

// Borrow watches the lease of a session the caller owns. It sends its own
// renewals (one per TTL/3) because only a renewal it sent tells it the send
// time the validity deadline needs.
func borrowNew(ctx context.Context, cs *concurrency.Session, cfg Config) (*Session, error) {
	cfg = withDefaults(cfg)
	select {
	case <-cs.Done():
		return nil, errs.Lost(errs.ErrSessionClosed)
	default:
	}
	cli := cs.Client()
	sent := cfg.Clock.Now()
	resp, err := cli.KeepAliveOnce(ctx, cs.Lease())
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, errs.Lost(errs.ErrLeaseExpired)
		}
		return nil, fmt.Errorf("renew borrowed session's lease: %w", err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	if cfg.MaxTTL > 0 && ttl > cfg.MaxTTL {
		return nil, fmt.Errorf("%w: session's lease TTL is %v, at most %v allowed (WithMaxTTL)", errs.ErrInvalid, ttl, cfg.MaxTTL)
	}
	s := newSession(cli, cs.Lease(), ttl, cfg)
	if cfg.Margin > ttl/2 {
		return nil, fmt.Errorf("%w: safety margin %v must be at most half the session's TTL %v", errs.ErrInvalid, cfg.Margin, ttl)
	}
	s.cs = cs
	s.start(sent)
	// A borrowed session can end by its owner's hand.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-cs.Done():
			s.lose(errs.ErrSessionClosed)
		case <-s.stop:
		}
	}()
	return s, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg
}

func newSession(cli *clientv3.Client, id clientv3.LeaseID, ttl time.Duration, cfg Config) *Session {
	ctx, cancel := context.WithCancelCause(context.Background())
	margin := cfg.Margin
	if margin == 0 {
		margin = DefaultMargin(ttl)
	}
	return &Session{cli: cli, id: id, ttl: ttl, margin: margin, cfg: cfg, ctx: ctx, cancel: cancel, stop: make(chan struct{})}
}

// DefaultMargin is the safety margin used when none is set: a fifth of the
// TTL, which covers a client clock running up to 20% slow against the
// server's.
func DefaultMargin(ttl time.Duration) time.Duration { return ttl / 5 }

func (s *Session) start(sent time.Time) {
	s.extend(sent, s.ttl)
	s.wg.Add(1)
	go s.renewLoop()
}

// Context ends when ownership through this lease may be gone; its cause
// wraps errs.ErrLost and the reason, or is errs.ErrReleased after Close.
func (s *Session) Context() context.Context { return s.ctx }

// Lost reports whether the session has ended.
func (s *Session) Lost() bool { return s.ctx.Err() != nil }

// ID is the lease ID.
func (s *Session) ID() clientv3.LeaseID { return s.id }

// TTL is the TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Concurrency is the underlying etcd session.
func (s *Session) Concurrency() *concurrency.Session { return s.cs }

// Client is the etcd client of the session.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Deadline is the current validity deadline.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Lose ends the session with the given reason, as when the holder of a key
// learns that the lease is gone before the renewal loop does.
func (s *Session) Lose(reason error) { s.lose(reason) }

func (s *Session) lose(reason error) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	cause := errs.Lost(reason)
	s.cancel(cause)
	s.mu.Unlock()
	s.cfg.Logger.Warn("lease lost", zap.String("lease", fmt.Sprintf("%x", int64(s.id))), zap.Error(cause))
}

// extend moves the validity deadline to sent + ttl - margin.
func (s *Session) extend(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	deadline := sent.Add(ttl - s.margin)
	if deadline.Before(s.deadline) {
		return
	}
	s.deadline = deadline
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = s.cfg.Clock.AfterFunc(deadline.Sub(s.cfg.Clock.Now()), func() {
		s.mu.Lock()
		due := !s.cfg.Clock.Now().Before(s.deadline)
		s.mu.Unlock()
		if due {
			s.lose(errs.ErrValidityExpired)
		}
	})
}

// renewLoop renews every TTL/3. An attempt may take up to TTL/6; after a
// failure it retries at once, and a second failure in a row ends the
// session: two attempts then fit well inside the validity deadline.
func (s *Session) renewLoop() {
	defer s.wg.Done()
	interval := s.ttl / 3
	attempt := s.ttl / 6
	wait := interval
	failures := 0
	for {
		if !s.sleep(wait) {
			return
		}
		sent := s.cfg.Clock.Now()
		ctx, cancel := context.WithTimeout(s.ctx, attempt)
		resp, err := s.cli.KeepAliveOnce(ctx, s.id)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		if err == nil {
			failures, wait = 0, interval
			s.extend(sent, time.Duration(resp.TTL)*time.Second)
			if s.cfg.OnRenewed != nil {
				s.cfg.OnRenewed(sent)
			}
			continue
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.lose(errs.ErrLeaseExpired)
			return
		}
		select {
		case <-s.stop:
			return
		default:
		}
		failures++
		if s.cfg.OnRenewalFailure != nil {
			s.cfg.OnRenewalFailure()
		}
		if failures >= 2 {
			s.lose(errs.ErrRenewalFailed)
			return
		}
		s.cfg.Logger.Info("lease renewal failed", zap.String("lease", fmt.Sprintf("%x", int64(s.id))), zap.Error(err))
		wait = 0
	}
}

// sleep waits d on the session's clock; false when the session ended.
func (s *Session) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	fired := make(chan struct{})
	t := s.cfg.Clock.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return s.ctx.Err() == nil
	case <-s.ctx.Done():
	case <-s.stop:
	}
	t.Stop()
	return false
}

// Close stops the watchdog and, for an owned lease, revokes it so that every
// key on it goes at once. A borrowed session is left to its owner.
// Close is idempotent and waits for the watchdog's goroutines.
func (s *Session) Close() error { return s.closeWithin(context.Background(), revokeTimeout) }

// CloseLost closes a session that was lost and is being replaced. It keeps
// trying to revoke the lease for up to twice the TTL: a lease can outlive
// an outage (a new etcd leader renews every lease), and its keys would
// block the queue until it expires. It gives up early when stop ends.
func (s *Session) CloseLost(stop context.Context) error {
	return s.closeWithin(stop, 2*s.ttl+revokeTimeout)
}

func (s *Session) closeWithin(stop context.Context, revokeFor time.Duration) error {
	if !s.owned && !shared.release(s) {
		return nil // other mutexes or elections still use this watchdog
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.cancel(errs.ErrReleased)
	close(s.stop)
	s.mu.Unlock()
	var err error
	if s.owned {
		s.cs.Orphan()
		err = s.revokeWithin(stop, revokeFor)
	}
	s.wg.Wait()
	return err
}

func (s *Session) revokeWithin(stop context.Context, d time.Duration) error {
	revoke := func(ctx context.Context) error {
		_, err := s.cli.Revoke(clientv3.WithRequireLeader(ctx), s.id)
		return err
	}
	ctx, cancel := context.WithTimeout(stop, d)
	err := retry.Do(ctx, revoke)
	cancel()
	if err != nil && stop.Err() != nil {
		// Told to stop early: one last bounded try.
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		err = retry.Do(ctx, revoke)
		cancel()
	}
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease %x: %w", int64(s.id), err)
	}
	return nil
}

// LeaseGone reports whether the lease no longer exists on the server, for
// telling a revoked lease from a deleted key. It answers false when it
// cannot tell.
func (s *Session) LeaseGone(ctx context.Context) bool {
	if s.ctx.Err() != nil && errors.Is(context.Cause(s.ctx), errs.ErrLeaseExpired) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := s.cli.TimeToLive(ctx, s.id)
	if err != nil {
		return errors.Is(err, rpctypes.ErrLeaseNotFound)
	}
	return resp.TTL <= 0
}

// keeper stands in for the client's Lease inside the owned
// concurrency.Session: its KeepAlive sends nothing itself, and its channel
// closes when the watchdog loses the lease or the session is orphaned.
type keeper struct {
	clientv3.Lease
	s *Session
}

func (k *keeper) KeepAlive(ctx context.Context, _ clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	ch := make(chan *clientv3.LeaseKeepAliveResponse)
	go func() {
		select {
		case <-ctx.Done():
		case <-k.s.ctx.Done():
		}
		close(ch)
	}()
	return ch, nil
}

// Owned reports whether the session owns its lease (it was granted by
// Grant, not borrowed).
func (s *Session) Owned() bool { return s.owned }

// Reserve claims key for one caller in this process until the returned
// release is called, waiting while another caller holds it; with try it
// returns ErrReserved instead of waiting. Keys are named
// after the lease, so without this two goroutines locking one name through
// one session would share a key and both believe they hold the lock.
func (s *Session) Reserve(ctx context.Context, key string, try bool, maxKeys int) (release func(), err error) {
	for {
		s.mu.Lock()
		if s.reserved == nil {
			s.reserved = make(map[string]chan struct{})
		}
		busy, taken := s.reserved[key]
		if !taken && maxKeys > 0 && len(s.reserved) >= maxKeys {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %d keys (held, waiting or being deleted) on lease %x, at most %d allowed (WithMaxHeld)",
				errs.ErrTooManyHeld, maxKeys, int64(s.id), maxKeys)
		}
		if !taken {
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
			return nil, ErrReserved
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
