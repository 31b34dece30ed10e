package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/retry"
)

// Lease is one lease of a session and its validity watchdog. Its context
// ends, with a cause wrapping errs.ErrLost, when ownership through it may be
// gone: at the validity deadline (send time of the last acknowledged
// renewal + TTL − margin, on the monotonic clock), after two failed
// renewals in a row, when etcd says it is gone, or when a borrowed
// session is closed by its owner. It ends with errs.ErrReleased when the
// session closes.
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

	// holds are ended by the lease's end: one callback for all of them,
	// rather than one registration (and ~150 bytes) per held key.
	holdsMu sync.Mutex
	holds   map[*Hold]struct{}
}

// addHold registers h to be ended, in its own goroutine, when the lease
// ends (at once if it has).
func (l *Lease) addHold(h *Hold) {
	l.holdsMu.Lock()
	defer l.holdsMu.Unlock()
	first := l.holds == nil
	if first {
		l.holds = make(map[*Hold]struct{})
	}
	l.holds[h] = struct{}{}
	if first {
		context.AfterFunc(l.ctx, l.endHolds)
	}
	if l.ctx.Err() != nil {
		// Armed on a lease that has ended: end it before Acquire returns
		// it, not when endHolds (which may have run already) gets to it.
		h.cancel(context.Cause(l.ctx))
		if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
			go h.end(cause)
		}
	}
}

// cancelHolds ends the context of every hold on the ended lease in the
// caller: endHolds runs in a goroutine of its own, and holders must know
// before what lets the next holder in (the revoke) is sent.
func (l *Lease) cancelHolds() {
	cause := context.Cause(l.ctx)
	l.holdsMu.Lock()
	defer l.holdsMu.Unlock()
	for h := range l.holds {
		h.cancel(cause) // no effect on a hold that ended first
	}
}

func (l *Lease) removeHold(h *Hold) {
	l.holdsMu.Lock()
	delete(l.holds, h)
	l.holdsMu.Unlock()
}

// endHolds ends every hold when the lease ends; a hold whose key was
// deleted first ends once the reason is told apart.
func (l *Lease) endHolds() {
	call(l.s.cfg.Hooks.EndingHolds)
	l.holdsMu.Lock()
	holds := make([]*Hold, 0, len(l.holds))
	for h := range l.holds {
		holds = append(holds, h)
	}
	l.holdsMu.Unlock()
	lost := context.Cause(l.ctx)
	for _, h := range holds {
		h.cancel(lost) // no effect on a hold that ended first
		if cause := context.Cause(h.ctx); !errors.Is(cause, errs.ErrKeyGone) {
			go h.end(cause)
		}
	}
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
	if l.ctx.Err() != nil {
		return
	}
	deadline := sent.Add(ttl - l.margin)
	if deadline.Before(l.deadline) {
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

// watchdog renews every TTL/3; an attempt may take TTL/6, and after a
// failure it retries at once, so two failures fit well inside the validity
// deadline. Once the lease is lost it revokes a granted lease (a partition
// that heals, or a new etcd leader renewing every lease, would otherwise
// keep its keys blocking the queue).
func (l *Lease) watchdog() {
	defer l.s.wg.Done()
	s := l.s
	var borrowedDone <-chan struct{}
	if s.borrowed != nil {
		borrowedDone = s.borrowed.Done()
	}
	interval, attempt := l.ttl/3, l.ttl/6
	wait, failures := interval, 0
	for l.ctx.Err() == nil {
		if !l.sleep(wait, borrowedDone) {
			break
		}
		sent := s.cfg.Clock.Now()
		ctx, cancel := context.WithTimeout(l.ctx, attempt)
		resp, err := s.cli.KeepAliveOnce(ctx, l.id)
		cancel()
		if l.ctx.Err() != nil {
			break
		}
		switch {
		case err == nil:
			failures, wait = 0, interval
			l.extend(sent, time.Duration(resp.TTL)*time.Second)
			call(s.cfg.Hooks.OnRenewed)
			continue
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.lose(errs.ErrLeaseExpired)
			continue
		}
		failures++
		s.renewalFailed()
		if failures >= 2 {
			l.lose(errs.ErrRenewalFailed)
			continue
		}
		s.cfg.Logger.Info("lease renewal failed", l.hex(), zap.Error(err))
		wait = 0
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.cancelHolds() // the lease may have ended in another goroutine
	if s.borrowed == nil && !errors.Is(context.Cause(l.ctx), errs.ErrReleased) {
		// Until etcd answers, however long an outage lasts: once quorum is
		// back its new leader renews every lease for a full TTL, and this
		// one's keys would block the queue that long.
		if err := l.revoke(s.ctx, 0); err != nil {
			s.cfg.Logger.Warn("could not revoke a lost lease; it expires by itself", l.hex(), zap.Error(err))
		}
	}
}

// sleep waits d on the session's clock; false when the lease ended.
func (l *Lease) sleep(d time.Duration, borrowedDone <-chan struct{}) bool {
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
	case <-borrowedDone:
		l.lose(errs.ErrSessionClosed)
	}
	return false
}

// revoke revokes the lease, retrying through connection errors for up to
// d (0: no bound) while stop lives, then once more briefly.
func (l *Lease) revoke(stop context.Context, d time.Duration) error {
	op := func(ctx context.Context) error {
		_, err := l.s.cli.Revoke(clientv3.WithRequireLeader(ctx), l.id)
		return err
	}
	ctx, cancel := stop, context.CancelFunc(func() {})
	if d > 0 {
		ctx, cancel = context.WithTimeout(stop, d)
	}
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
