package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

const (
	// rest is the pause before a shard whose fn returned nil, or whose
	// acquisition failed, is tried again.
	rest = 100 * time.Millisecond
	// leaveTimeout bounds the deletion of the member's key when Run ends.
	leaveTimeout = 2 * time.Second
)

// hooks are pause points that tests use to force an interleaving; nil in
// production.
type hooks struct {
	moving    hookID  // in the member's loop, as it ends a shard's Context with ErrMoved
	releasing hookID  // before a shard's release is sent (fn returned or the drain timed out)
	left      hook    // after the member's key was deleted, before its shards are ended
	acted     hookRev // once the loop acted on the view at a revision
}

// Run joins the group as member and calls fn once per shard this member
// owns, each on its own goroutine, with the Shard's Context. Until ctx ends
// Run keeps the member in the group, takes the shards the balance gives it
// and gives up those it must: the shard's Context ends with ErrMoved, and
// the shard is released when fn returns, or after the drain timeout at the
// latest; the new owner is queued on it already, so it takes over in a
// round trip. After a loss of the lease Run joins again on a new one.
//
// When ctx ends (or Close is called) Run leaves the group (the member's key
// is deleted first, so the others queue on its shards while they drain),
// ends every shard's Context with ErrReleased, releases each once fn
// returned or the drain timeout passed, waits for every fn to return, and
// returns ctx.Err() (ErrClosed after Close). The member key's deletion is
// retried until etcd answers or the lease ends (a key left on a shared
// session's lease would keep shards assigned to a member nobody runs), so
// Run may take as long as an outage to return; if etcd refuses the
// deletion for good (permission denied), Run returns an error that says
// the key stays until its lease ends. If fn returns an error, Run
// does the same and returns that error, unless the shard's Context had
// ended and the error is context.Canceled or its cause: that is fn
// stopping as asked. If fn returns nil while the shard is still this
// member's, the shard is released and assigned again, to this member or
// another, after at least 100 ms.
//
// Run refuses, with nothing written to etcd: a member name that is empty,
// longer than 256 bytes, not UTF-8 or with control characters
// (ErrInvalid); a group whose live members use another shard count
// (ErrCountMismatch, naming both); a member name live on another lease,
// another member live on this one, or the same name run already through
// this session by another Group (ErrDuplicateMember); a second Run of this
// Group while one is in progress (ErrRunning).
func (g *Group) Run(ctx context.Context, member string, fn func(ctx context.Context, s *Shard) error) error {
	if err := keys.ValidateName("member name", member); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: fn must not be nil", ErrInvalid)
	}
	if !g.enter() {
		return ErrClosed
	}
	defer g.wg.Done()
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return ErrRunning
	}
	g.running = true
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.running = false; g.mu.Unlock() }()
	// One Run of a name per session: another Group on it may run the name
	// already, and its key on this lease would pass for this Run's own.
	free, ok := g.sess.Claim(memberKey(g.prefix, member))
	if !ok {
		return fmt.Errorf("%w: member %q of group %q runs already on this session", ErrDuplicateMember, member, g.name)
	}
	defer free()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(g.ctx, func() { cancel(ErrClosed) })()
	met, err := metrics.NewShards(g.cfg.Session.Registerer, g.ns, g.label, member)
	if err != nil {
		return fmt.Errorf("%w: WithRegisterer: %w", ErrInvalid, err)
	}
	e := &run{g: g, member: member, fn: fn, ctx: ctx, stop: cancel, met: met, events: make(chan func()), dead: make(chan struct{}),
		local: map[int]*local{}, stuck: map[int]bool{}, vacancies: map[int]vacancy{}, leases: map[clientv3.LeaseID]bool{}, h: g.hooks}
	if g.hooks == nil {
		e.h = &hooks{}
	}
	if g.met != nil {
		if fn := g.met.RenewalFailed(g.ns, g.label); fn != nil {
			defer g.sess.OnRenewalFailure(fn)()
		}
	}
	v, l, rev, err := e.join(ctx, nil, nil, nil)
	if err != nil {
		if ctx.Err() != nil && !errors.As(err, new(*keyStays)) {
			return e.result()
		}
		return err
	}
	e.v = v
	e.joined(l, rev, nil)
	return e.loop()
}

// run is one Run: the loop that owns every field below runs in Run's
// goroutine; the goroutines it starts report back through events.
type run struct {
	g      *Group
	member string
	fn     func(context.Context, *Shard) error
	ctx    context.Context
	stop   context.CancelCauseFunc // ends ctx: Run is over
	met    *metrics.Shards
	h      *hooks
	events chan func()
	dead   chan struct{}  // closed when the loop returned: late reports are dropped
	wg     sync.WaitGroup // the goroutines that report through events

	// The view of the group and the assignment at it (view.go).
	v       *view
	target  []string
	wch     clientv3.WatchChan
	wcancel context.CancelFunc

	// The shards (state.go) and their metrics (moves.go).
	local     map[int]*local
	stuck     map[int]bool // shards in phase zombie
	vacancies map[int]vacancy
	owned     int
	atCap     bool // an acquisition failed at the session's WithMaxHeld since the last one succeeded

	// The member's key (join.go).
	lease      *core.Lease
	leaseStop  func() bool               // unregisters watchLease's AfterFunc
	leases     map[clientv3.LeaseID]bool // every lease this Run joined on
	joinedRev  int64                     // the view must reach it before it judges membership
	joining    bool
	leaving    bool
	published  []int // the stuck shards the member's key names
	publishing bool
	departing  int // deletions of the member's key still retried

	err error // the error Run returns, if not ctx's
}

// send runs f in the loop; dropped once the loop returned.
func (e *run) send(f func()) {
	select {
	case e.events <- f:
	case <-e.dead:
	}
}

func (e *run) result() error {
	if e.err != nil {
		return e.err
	}
	if cause := context.Cause(e.ctx); errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return e.ctx.Err()
}

// spawn runs fn in a goroutine the loop waits for before Run returns.
func (e *run) spawn(fn func()) {
	e.wg.Add(1)
	go func() { defer e.wg.Done(); fn() }()
}

// loop follows the group's keys and the member's shards until Run ends.
func (e *run) loop() error {
	defer func() {
		for _, l := range e.local { // only timers and AfterFuncs remain
			e.stopTimers(l)
		}
		if e.leaseStop != nil {
			e.leaseStop() // a shared lease outlives the Run
		}
		e.unwatch()
		close(e.dead)
		e.wg.Wait()
		e.met.Forget()
	}()
	e.watch()
	e.watchLease()
	e.reconcile()
	done := e.ctx.Done()
	for {
		if e.leaving && len(e.local) == 0 && !e.joining && e.departing == 0 {
			return e.result()
		}
		select {
		case f := <-e.events:
			f()
		case wr, ok := <-e.wch:
			if !e.follow(wr, ok) && e.wch == nil {
				continue
			}
		case <-done:
			done = nil
			e.leave()
		}
		// Take what else is ready before one reconcile: a burst of moves
		// costs one assignment, not one per event.
	more:
		for i := 0; i < 256; i++ {
			select {
			case f := <-e.events:
				f()
			case wr, ok := <-e.wch:
				if !e.follow(wr, ok) {
					break more
				}
			default:
				break more
			}
		}
		e.reconcile()
	}
}

// reconcile computes the assignment at the view and acts on it: takes the
// shards it gives this member, gives up the others. It also joins again
// when the member's key is gone (its lease ended).
func (e *run) reconcile() {
	if e.leaving || e.v.rev < e.joinedRev {
		return // the view is behind this member's own join
	}
	me, ok := e.v.members[e.member]
	in := ok && e.lease != nil && me.lease == e.lease.ID() && e.lease.Context().Err() == nil
	if !in && !e.joining {
		e.rejoin()
	}
	e.target = e.v.target()
	for id, to := range e.target {
		mine := in && to == e.member
		switch l := e.local[id]; {
		case l == nil && mine:
			e.acquire(id)
		case l != nil && !mine:
			e.step(l, evGiveUp, nil)
		}
	}
	e.publish()
	e.h.acted.call(e.v.rev)
}

// wants says whether the last assignment gives shard id to this member.
func (e *run) wants(id int) bool {
	return !e.leaving && e.target != nil && e.target[id] == e.member && e.lease != nil && e.lease.Context().Err() == nil
}

// fail ends Run with err (the first one wins).
func (e *run) fail(err error) {
	if e.err == nil {
		e.err = err
	}
	e.stop(err)
	e.leave()
}

func (e *run) fields(f ...zap.Field) []zap.Field {
	return append(f, zap.String("name", e.g.name), zap.String("namespace", e.g.ns), zap.String("member", e.member))
}

type (
	hookID  func(id int)
	hook    func()
	hookRev func(rev int64)
)

func (f hookRev) call(rev int64) {
	if f != nil {
		f(rev)
	}
}

func (f hookID) call(id int) {
	if f != nil {
		f(id)
	}
}

func (f hook) call() {
	if f != nil {
		f()
	}
}
