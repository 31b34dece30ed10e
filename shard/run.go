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
	rejoining hook    // as the member starts to join again after its key went
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
	free, ok := claim(g.sess, memberKey(g.prefix, member))
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
		index: map[string]int{}, want: make([]bool, g.count), mark: make([]bool, g.count),
		local: map[int]*local{}, stuck: map[int]bool{}, vacancies: map[int]vacancy{}, leases: map[clientv3.LeaseID]*core.Lease{}, h: g.hooks}
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

	// The view of the group (view.go) and the assignment at it (assign.go).
	v              *view
	wch            clientv3.WatchChan
	wcancel        context.CancelFunc
	a              *assigner // nil: rebuilt at the next reconcile
	order          []member  // the members in join order, as a knows them
	index          map[string]int
	me             int    // this member's index in order, or -1
	in             bool   // this member is live in the view, on its lease
	want           []bool // per shard: the assignment gives it to this member
	span           [2]int // this member's run among the free shards (assigner.span)
	membersChanged bool
	dirty          []int  // shards whose keys changed since the last reconcile
	mark           []bool // per shard: in dirty
	redo           []int  // shards this member ended since: taken again if still its own
	flips          []int  // scratch

	// The shards (state.go) and their metrics (moves.go).
	local     map[int]*local
	stuck     map[int]bool // shards in phase zombie
	vacancies map[int]vacancy
	owned     int
	atCap     bool // an acquisition failed at the session's WithMaxHeld since the last one succeeded

	// The member's key (join.go).
	lease      *core.Lease
	leaseStop  func() bool                      // unregisters watchLease's AfterFunc
	leases     map[clientv3.LeaseID]*core.Lease // every lease this Run joined on
	joinedRev  int64                            // the view must reach it before it judges membership
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

// reconcile keeps the assignment current with the view and acts on what
// changed: takes the shards it now gives this member, gives up those it
// no longer does. The work is proportional to the shards whose owner
// changed since the last reconcile (assign.go's assigner); a change of the
// members rebuilds the assignment, O(N). It also joins again when the
// member's key is gone (its lease ended).
func (e *run) reconcile() {
	if e.leaving || e.v.rev < e.joinedRev {
		return // the view is behind this member's own join
	}
	me, ok := e.v.members[e.member]
	in := ok && e.lease != nil && me.lease == e.lease.ID() && e.lease.Context().Err() == nil
	if !in && !e.joining && !e.settling() {
		e.rejoin()
	}
	flips := e.flips[:0]
	full := e.a == nil || e.membersChanged || in != e.in
	if e.a == nil || e.membersChanged {
		e.rebuild()
	} else {
		for _, s := range e.dirty {
			e.a.setOwner(s, e.ownerOf(s))
		}
		touched, shifts := e.a.take()
		if e.me >= 0 {
			flips, e.span[0], e.span[1] = e.a.follow(e.me, e.want, e.span[0], e.span[1], touched, shifts, flips)
		}
	}
	for _, s := range e.dirty {
		e.mark[s] = false
	}
	e.dirty, e.membersChanged, e.in = e.dirty[:0], false, in
	act := func(id int) {
		mine := in && e.want[id]
		switch l := e.local[id]; {
		case l == nil && mine:
			e.acquire(id)
		case l != nil && !mine:
			e.step(l, evGiveUp, nil)
		}
	}
	if full {
		for id := range e.want {
			act(id)
		}
	} else {
		for _, id := range flips {
			act(id)
		}
		for _, id := range e.redo {
			act(id)
		}
	}
	e.flips, e.redo = flips, e.redo[:0]
	e.publish()
	e.h.acted.call(e.v.rev)
}

// changed notes a watch event on shard s (-1: none) or on a member key.
func (e *run) changed(s int, kind byte) {
	switch {
	case kind == 'm':
		e.membersChanged = true
	case s >= 0 && !e.mark[s]:
		e.mark[s] = true
		e.dirty = append(e.dirty, s)
	}
}

// rebuild makes the assignment anew from the view: the members in join
// order, each shard's owner (its oldest key's member, on that member's
// lease), the shards stuck on each member.
func (e *run) rebuild() {
	e.order = e.v.order()
	clear(e.index)
	e.me = -1
	var stuck [][]int
	for i, m := range e.order {
		e.index[m.name] = i
		if m.name == e.member {
			e.me = i
		}
		if len(m.value.Stuck) > 0 {
			if stuck == nil {
				stuck = make([][]int, len(e.order))
			}
			stuck[i] = m.value.Stuck
		}
	}
	owner := make([]int, e.g.count)
	for s := range owner {
		owner[s] = e.ownerOf(s)
	}
	e.a = newAssigner(e.g.count, len(e.order), owner, stuck)
	e.a.take()
	for s := range e.want {
		e.want[s] = e.me >= 0 && e.a.target(s) == e.me
	}
	if e.me >= 0 {
		e.span[0], e.span[1] = e.a.span(e.me)
	}
}

// ownerOf is the member that owns shard s in the view (an index into
// e.order), or -1: none, or a key left on an earlier lease of its name.
func (e *run) ownerOf(s int) int {
	h, ok := e.v.head(s)
	if !ok {
		return -1
	}
	if i, ok := e.index[h.member]; ok && e.order[i].lease == h.lease {
		return i
	}
	return -1
}

// wants says whether the assignment gives shard id to this member.
func (e *run) wants(id int) bool {
	return !e.leaving && e.in && e.want[id] && e.lease != nil && e.lease.Context().Err() == nil
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
