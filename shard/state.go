package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// The life of one shard on this member: a *local from the first try to
// the end. step makes every transition, in the loop, on one event:
//
//	phase      acquired    failed   ended      returned    drained    released    rested  give up
//	acquiring  running¹    resting  ·          ·           ·          ·           ·       cancel the acquisition
//	running    ·           ·        draining²  releasing³  ·          ·           ·       end the Context (cause)
//	draining   ·           ·        ·          releasing   releasing  ·           ·       ·
//	releasing  ·           ·        ·          ·⁴          ·          ⁵           ·       ·
//	zombie     ·           ·        ·          gone        ·          ·           ·       ·
//	resting    ·           ·        ·          ·           ·          ·           gone    gone if Run ends
//
//	¹ releasing at once, its Context ended, if the shard is no longer this member's
//	² releasing at once under planted bug m
//	³ its Context ended (ErrReleased); resting after the release if fn returned nil
//	⁴ fn is done: the release decides
//	⁵ zombie while fn runs on (released at the drain timeout: the member
//	  names the shard stuck and others take it), resting if fn returned nil
//	  while owned, else gone
//
// "·": the event does not happen in that phase, or changes nothing. The
// cause of every end this member gives a shard is chosen by cause.
type phase uint8

const (
	acquiring phase = iota
	running         // fn runs, its Context live
	draining        // its Context ended: waiting for fn or the drain timeout
	releasing       // the release is in flight
	zombie          // released at the drain timeout; fn has not returned yet
	resting         // waiting before the shard is tried again
)

// event is what step is told about a shard.
type event uint8

const (
	evAcquired event = iota // the acquisition returned the Shard (l.sh)
	evFailed                // the acquisition failed
	evEnded                 // the Shard's Context ended
	evReturned              // fn returned
	evDrained               // the drain timeout passed
	evReleased              // the release returned
	evRested                // the rest passed
	evGiveUp                // the loop: not this member's shard any more, or Run ends
)

// local is one shard this member is taking, owns or gives up.
type local struct {
	id      int
	phase   phase
	cancel  context.CancelFunc // the acquisition's
	sh      *Shard
	fnDone  bool
	timer   *time.Timer
	stop    func() bool // the AfterFunc of the Shard's Context
	again   bool        // fn returned nil while owned: rest before the next try
	pending bool        // fn started before this member saw the old owner's key go (metrics)
	owned   bool        // counted in the owned gauge
}

// step moves shard l on ev (err: the acquisition's, fn's or the release's).
func (e *run) step(l *local, ev event, err error) {
	if e.local[l.id] != l {
		return // a timer of a shard this member is done with
	}
	if ev == evReturned {
		e.fnReturned(l, err)
	}
	switch l.phase {
	case acquiring:
		switch ev {
		case evAcquired:
			l.cancel()
			e.atCap = false
			if !e.wants(l.id) {
				e.end(l)
				l.fnDone = true // it never starts
				e.release(l)
				return
			}
			e.start(l)
		case evFailed:
			l.cancel()
			e.refused(l, err)
			e.rest(l)
		case evGiveUp:
			l.cancel()
		}
	case running:
		switch ev {
		case evEnded:
			l.phase = draining
			if planted.On("m") {
				e.release(l)
				return
			}
			l.timer = time.AfterFunc(e.g.drain, func() { e.send(func() { e.step(l, evDrained, nil) }) })
		case evReturned:
			l.again = err == nil && l.sh.ctx.Err() == nil
			e.end(l)
			e.release(l)
		case evGiveUp:
			e.end(l)
		}
	case draining:
		switch ev {
		case evReturned:
			e.release(l)
		case evDrained:
			e.g.cfg.Session.Logger.Warn("shard: work did not return within the drain timeout; releasing the shard", e.fields(zap.Int("shard", l.id), zap.Duration("drain", e.g.drain))...)
			e.release(l)
		}
	case releasing:
		if ev != evReleased {
			return
		}
		if err != nil && !errors.Is(err, ErrNotHeld) {
			e.g.cfg.Session.Logger.Warn("shard: release failed", e.fields(zap.Int("shard", l.id), zap.Error(err))...)
		}
		if !l.fnDone {
			l.phase = zombie // its fn keeps the shard from being taken here again: others take it
			e.stuck[l.id] = true
			return
		}
		e.finish(l)
	case zombie:
		if ev == evReturned {
			delete(e.stuck, l.id)
			e.g.cfg.Session.Logger.Info("shard: work returned after its drain timeout; the shard may be taken here again", e.fields(zap.Int("shard", l.id))...)
			e.finish(l)
		}
	case resting:
		if ev == evRested || ev == evGiveUp && e.leaving {
			e.forget(l)
		}
	}
}

// cause is why this member ends shard l's Context, chosen here for every
// path: Run ending, or fn returning while the shard was still this
// member's, is ErrReleased; a key the view saw made and gone before the
// hold heard (a revoke, a delete) is a loss with the hold's cause, and a
// lease that ended before the session ended its hold (also one this Run
// has joined again since) the lease's cause, never a move; otherwise the
// assignment gave the shard to another member: ErrMoved.
func (e *run) cause(l *local) error {
	switch {
	case e.leaving, l.fnDone:
		return ErrReleased
	case e.v.rev >= int64(l.sh.Token()) && !e.v.has(l.id, l.sh.Key()):
		return errs.Lost(errs.ErrKeyGone)
	case e.leaseEnded(l.sh) != nil:
		return e.leaseEnded(l.sh)
	}
	return ErrMoved
}

// end ends shard l's Context with its cause.
func (e *run) end(l *local) {
	cause := e.cause(l)
	if cause == ErrMoved {
		e.h.moving.call(l.id)
	}
	l.sh.cancel(cause)
}

// leaseEnded is the cause of the end of the lease sh is held on, if this
// Run joined on that lease (its current one, or one it lost and joined
// again since) and it ended; nil otherwise.
func (e *run) leaseEnded(sh *Shard) error {
	if l := e.leases[sh.Lease()]; l != nil && l.Context().Err() != nil {
		return context.Cause(l.Context())
	}
	return nil
}

// fnReturned notes fn's return; an error other than the Context's own ends
// Run with it.
func (e *run) fnReturned(l *local, err error) {
	l.fnDone = true
	ctx := l.sh.ctx
	if err != nil && !(ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.Cause(ctx)))) {
		e.fail(fmt.Errorf("shard %d: %w", l.id, err))
	}
}

// refused handles a failed acquisition's error.
func (e *run) refused(l *local, err error) {
	if e.ctx.Err() == nil && retry.Permanent(err) {
		e.fail(fmt.Errorf("shard %d: %w", l.id, err))
	}
	if errors.Is(err, errs.ErrTooManyHeld) && !e.atCap {
		// Only a shared session's other keys can fill it (New refuses a
		// cap below the count): said once per stretch at the cap.
		e.atCap = true
		e.g.cfg.Session.Logger.Warn("shard: the session holds as many keys as WithMaxHeld allows; retrying the shard every 100 ms until it has room",
			e.fields(zap.Int("shard", l.id), zap.Int("max_held", e.g.sess.Settings().MaxHeld))...)
	}
}

// acquire starts taking shard id: its key queues on the shard.
func (e *run) acquire(id int) {
	actx, cancel := context.WithCancel(e.ctx)
	l := &local{id: id, phase: acquiring, cancel: cancel}
	e.local[id] = l
	o := e.g.owner(id)
	count, member := e.g.count, e.member
	e.spawn(func() {
		sh, err := o.Acquire(actx, core.Request{Value: member}, func(h *core.Hold) *Shard { return newShard(h, id, count, member) })
		e.send(func() {
			if err != nil {
				e.step(l, evFailed, err)
				return
			}
			l.sh = sh
			e.step(l, evAcquired, nil)
		})
	})
}

// start runs fn on shard l, now this member's.
func (e *run) start(l *local) {
	l.phase = running
	e.owns(l, true)
	e.movedIn(l)
	sh := l.sh
	l.stop = context.AfterFunc(sh.ctx, func() { e.send(func() { e.step(l, evEnded, nil) }) })
	e.spawn(func() {
		err := e.fn(sh.ctx, sh)
		e.send(func() { e.step(l, evReturned, err) })
	})
}

// release deletes the shard's key, once its fn returned or the drain
// timed out.
func (e *run) release(l *local) {
	e.stopTimers(l)
	l.phase = releasing
	e.owns(l, false)
	h := e.h
	e.spawn(func() {
		h.releasing.call(l.id)
		err := core.Release(context.Background(), l.sh.hold)
		e.send(func() { e.step(l, evReleased, err) })
	})
}

// finish ends shard l here, or rests it if fn returned nil while owned.
func (e *run) finish(l *local) {
	if l.again {
		e.rest(l)
		return
	}
	e.forget(l)
}

// forget ends shard l here: the loop takes it again if it is still this
// member's.
func (e *run) forget(l *local) {
	e.stopTimers(l)
	delete(e.local, l.id)
	e.redo = append(e.redo, l.id)
}

// rest keeps shard l from being tried again for a while.
func (e *run) rest(l *local) {
	if e.leaving {
		e.forget(l)
		return
	}
	l.phase, l.again = resting, false
	l.timer = time.AfterFunc(rest, func() { e.send(func() { e.step(l, evRested, nil) }) })
}

func (e *run) stopTimers(l *local) {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}
