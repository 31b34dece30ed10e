// Package lease is one etcd lease and its validity watchdog: the context
// that ends before the server can expire the lease, on the monotonic clock.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// Config is what the leases of one session share.
type Config struct {
	Client *clientv3.Client
	Clock  Clock
	Logger *zap.Logger
	// Granted leases are revoked after a loss; a caller's is left to it.
	Granted bool
	// KeysToDeadline revokes a lost granted lease only once its validity
	// deadline passed (or stop ended): a remote caller given validity up
	// to it keeps its keys that long, whether it heard of the loss or not.
	KeysToDeadline bool
	// EtcdDone, a caller's etcd session's Done, ends the lease.
	EtcdDone <-chan struct{}
	// OnRenewed runs after each acknowledged renewal, OnFailure after each
	// failed one.
	OnRenewed, OnFailure func()
}

// Lease is one lease and its watchdog. Its context ends with a loss
// (errs.ErrLost and a reason) when ownership through it may be gone, or
// with its parent's cause.
type Lease struct {
	cfg    *Config
	id     clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
	onEnd  func(cause error) // tells the holders, before anything lets the next one in

	mu       sync.Mutex
	deadline time.Time
	sent     time.Time // of the grant or renewal that set deadline
	timer    Timer

	revoked atomic.Bool // etcd answered a revoke: the lease and its keys are gone
}

// New returns the lease id of the granted ttl, valid until sent + ttl −
// margin (zero: DefaultMargin); onEnd runs where the lease ends, before any
// revoke. A margin over half the TTL is refused with errs.ErrInvalid.
func New(parent context.Context, cfg *Config, id clientv3.LeaseID, ttl, margin time.Duration, sent time.Time, onEnd func(cause error)) (*Lease, error) {
	if margin == 0 {
		margin = DefaultMargin(ttl)
	}
	if margin > ttl/2 {
		return nil, fmt.Errorf("%w: safety margin %v must be at most half the lease's TTL %v", errs.ErrInvalid, margin, ttl)
	}
	ctx, cancel := context.WithCancelCause(parent)
	l := &Lease{cfg: cfg, id: id, ttl: ttl, margin: margin, ctx: ctx, cancel: cancel, onEnd: onEnd}
	l.extend(sent, ttl)
	return l, nil
}

// DefaultMargin is a fifth of the TTL, which covers a client clock running
// up to 20% slow.
func DefaultMargin(ttl time.Duration) time.Duration { return ttl / 5 }

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

// Hex is the lease's log field.
func (l *Lease) Hex() zap.Field { return zap.String("lease", fmt.Sprintf("%x", int64(l.id))) }

// Lose ends the lease with a loss (no effect once it ended).
func (l *Lease) Lose(reason error) {
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
	if !planted.On("b") {
		l.onEnd(context.Cause(l.ctx))
	}
	l.cfg.Logger.Warn("lease lost", l.Hex(), zap.Error(cause))
}

// extend moves the validity deadline to sent + ttl − margin.
func (l *Lease) extend(sent time.Time, ttl time.Duration) {
	clock := l.cfg.Clock
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := sent.Add(ttl - l.margin)
	if l.ctx.Err() != nil || deadline.Before(l.deadline) {
		return
	}
	l.deadline, l.sent = deadline, sent
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = clock.AfterFunc(deadline.Sub(clock.Now()), func() {
		l.mu.Lock()
		due := !clock.Now().Before(l.deadline)
		l.mu.Unlock()
		if due {
			l.Lose(errs.ErrValidityExpired)
		}
	})
}

// Watchdog renews TTL/3 after the send of the grant or renewal last
// acknowledged (at once after a late answer: a grant answered as a
// partition heals may leave less than TTL/3 of validity), each attempt
// bounded by TTL/6 and retried at once after a failure, so two failures
// fit inside the validity deadline.
// After a loss it revokes a granted lease for up to twice the TTL, or until
// stop ends: a healed partition or a new etcd leader would otherwise keep
// its keys in the queue. With KeysToDeadline it waits for the lease's
// deadline first.
func (l *Lease) Watchdog(stop context.Context) {
	interval, attempt := l.ttl/3, l.ttl/6
	wait, failures := l.due(interval), 0
	for l.ctx.Err() == nil {
		if !l.sleep(wait) {
			break
		}
		sent := l.cfg.Clock.Now()
		ctx, cancel := context.WithTimeout(l.ctx, attempt)
		resp, err := l.cfg.Client.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case l.ctx.Err() != nil:
		case err == nil:
			l.extend(sent, time.Duration(resp.TTL)*time.Second)
			failures, wait = 0, l.due(interval)
			call(l.cfg.OnRenewed)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.Lose(errs.ErrLeaseExpired)
		default:
			failures, wait = failures+1, 0
			call(l.cfg.OnFailure)
			if failures >= 2 {
				l.Lose(errs.ErrRenewalFailed)
			} else {
				l.cfg.Logger.Info("lease renewal failed", l.Hex(), zap.Error(err))
			}
		}
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	if !planted.On("b") {
		l.onEnd(context.Cause(l.ctx)) // the lease may have ended in another goroutine
	}
	if l.cfg.Granted && !errors.Is(context.Cause(l.ctx), errs.ErrReleased) {
		if l.cfg.KeysToDeadline && !planted.On("A") { // A: revoked at once
			l.mu.Lock()
			d := l.deadline
			l.mu.Unlock()
			if wait := d.Sub(l.cfg.Clock.Now()); wait > 0 {
				passed := make(chan struct{})
				t := l.cfg.Clock.AfterFunc(wait, func() { close(passed) })
				select {
				case <-passed:
				case <-stop.Done(): // closing: revoked at once, as without
				}
				t.Stop()
			}
		}
		if err := l.Revoke(stop, 2*l.ttl); err != nil {
			l.cfg.Logger.Warn("could not revoke a lost lease; it expires by itself", l.Hex(), zap.Error(err))
		}
	}
	if planted.On("b") && !errors.Is(context.Cause(l.ctx), errs.ErrReleased) {
		l.onEnd(context.Cause(l.ctx)) // a released lease's holds: after the closer's revoke
	}
}

// due is how long until interval after the last acknowledged send.
func (l *Lease) due(interval time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent.Add(interval).Sub(l.cfg.Clock.Now())
}

// sleep waits d on the clock; false when the lease ended.
func (l *Lease) sleep(d time.Duration) bool {
	if d <= 0 {
		return l.ctx.Err() == nil
	}
	fired := make(chan struct{})
	t := l.cfg.Clock.AfterFunc(d, func() { close(fired) })
	defer t.Stop()
	select {
	case <-fired:
		return l.ctx.Err() == nil
	case <-l.ctx.Done():
	case <-l.cfg.EtcdDone:
		l.Lose(errs.ErrSessionClosed)
	}
	return false
}

// Revoke revokes the lease, retrying for up to d while stop lives, then
// once more briefly if stop ended first.
func (l *Lease) Revoke(stop context.Context, d time.Duration) error {
	op := func(ctx context.Context) error {
		_, err := l.cfg.Client.Revoke(clientv3.WithRequireLeader(ctx), l.id)
		return err
	}
	ctx, cancel := context.WithTimeout(stop, d)
	err := retry.Do(ctx, op)
	cancel()
	if err != nil && stop.Err() != nil && !retry.Permanent(err) {
		ctx, cancel := context.WithTimeout(context.Background(), min(d, 2*time.Second))
		err = retry.Do(ctx, op)
		cancel()
	}
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease %x: %w", int64(l.id), err)
	}
	l.revoked.Store(true)
	return nil
}

// Revoked says whether etcd answered a Revoke of the lease (or said it was
// gone): every key on it is deleted, and nothing needs deleting one.
func (l *Lease) Revoked() bool { return l.revoked.Load() }

// Gone reports whether the lease no longer exists on the server; false
// when it cannot tell.
func (l *Lease) Gone(ctx context.Context) bool {
	if errors.Is(context.Cause(l.ctx), errs.ErrLeaseExpired) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := l.cfg.Client.TimeToLive(ctx, l.id)
	if err != nil {
		return errors.Is(err, rpctypes.ErrLeaseNotFound)
	}
	return resp.TTL <= 0
}

func call(f func()) {
	if f != nil {
		f()
	}
}
