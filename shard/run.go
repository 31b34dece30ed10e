package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
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
		local: map[int]*local{}, stuck: map[int]bool{}, vacated: map[int]vacancy{}, leases: map[clientv3.LeaseID]bool{}, h: g.hooks}
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

type phase uint8

const (
	acquiring phase = iota
	running         // fn runs, its Context live
	draining        // its Context ended: waiting for fn or the drain timeout
	releasing       // the release is in flight
	zombie          // released at the drain timeout; fn has not returned yet
	resting         // waiting before the shard is tried again
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

// vacancy is a shard whose owner's key this member saw deleted.
type vacancy struct {
	at     time.Time
	reason string
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

	v          *view
	target     []string
	local      map[int]*local
	vacated    map[int]vacancy
	lease      *core.Lease
	leaseStop  func() bool               // unregisters watchLease's AfterFunc
	leases     map[clientv3.LeaseID]bool // every lease this Run joined on
	joinedRev  int64                     // the view must reach it before it judges membership
	joining    bool
	leaving    bool
	stuck      map[int]bool // shards in phase zombie
	published  []int        // the stuck shards the member's key names
	publishing bool
	departing  int  // deletions of the member's key still retried
	atCap      bool // an acquisition failed at the session's WithMaxHeld since the last one succeeded

	err   error // the error Run returns, if not ctx's
	owned int
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

// join puts the member's key on the session's lease, once the group's live
// members were read and found to agree: same count, no other lease under
// the name. A txn guarded by the members' ModRevision makes the check and
// the put one step.
func (e *run) join(ctx context.Context, lease *core.Lease, leases map[clientv3.LeaseID]bool, stuck []int) (*view, *core.Lease, int64, error) {
	g := e.g
	key := memberKey(g.prefix, e.member)
	val := e.value(stuck)
	for attempt := 0; ; attempt++ {
		v, err := g.read(ctx)
		if err != nil {
			return nil, nil, 0, err
		}
		var cur *core.Lease
		if lease != nil && lease.Context().Err() == nil {
			cur = lease
		}
		var mine *member
		for name, m := range v.members {
			if m.value.Count != g.count {
				return nil, nil, 0, fmt.Errorf("%w: group %q's live member %q uses %d shards, this Group %d", ErrCountMismatch, g.name, name, m.value.Count, g.count)
			}
			switch {
			case name == e.member && !leases[m.lease] && m.lease != g.sess.LeaseID():
				return nil, nil, 0, fmt.Errorf("%w: member %q of group %q is live on lease %x", ErrDuplicateMember, e.member, g.name, int64(m.lease))
			case name == e.member:
				m := m
				mine = &m
			case cur != nil && m.lease == cur.ID():
				return nil, nil, 0, fmt.Errorf("%w: member %q of group %q runs on this lease already", ErrDuplicateMember, name, g.name)
			}
		}
		l, err := g.sess.Lease(ctx)
		if err != nil {
			return nil, nil, 0, err
		}
		for name, m := range v.members {
			if name != e.member && m.lease == l.ID() {
				return nil, nil, 0, fmt.Errorf("%w: member %q of group %q runs on this lease already", ErrDuplicateMember, name, g.name)
			}
		}
		if mine != nil && mine.lease == l.ID() && string(val) == string(mustValue(mine.value)) {
			return v, l, v.rev, nil
		}
		exists := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if mine != nil {
			exists = clientv3.Compare(clientv3.CreateRevision(key), "=", mine.rev)
		}
		var resp *clientv3.TxnResponse
		err = retry.Do(ctx, func(actx context.Context) (err error) {
			resp, err = g.cli.Txn(clientv3.WithRequireLeader(actx)).
				If(exists, clientv3.Compare(clientv3.ModRevision(g.prefix+memberSeg).WithPrefix(), "<", v.rev+1)).
				Then(clientv3.OpPut(key, string(val), clientv3.WithLease(l.ID()))).Commit()
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				if kerr := e.unjoinUntilDone(l); kerr != nil { // the put may have applied unheard
					err = kerr
				}
			}
			return nil, nil, 0, err
		}
		if resp.Succeeded {
			// The view is the put's revision, so that the loop's watch sees
			// every change after it: a shard another member gave up at once is
			// a move (for the metrics), not a shard found free.
			v, err := g.readAt(ctx, resp.Header.Revision)
			if err != nil && ctx.Err() != nil {
				if kerr := e.unjoinUntilDone(l); kerr != nil { // Run ends before it could follow the group
					err = kerr
				}
			}
			return v, l, resp.Header.Revision, err
		}
		// A member joined or changed meanwhile: read again.
		if err := retry.Sleep(ctx, time.Duration(attempt%10)*10*time.Millisecond); err != nil {
			return nil, nil, 0, err
		}
	}
}

func mustValue(v memberValue) []byte { b, _ := json.Marshal(v); return b }

// value is the member key's value, naming the shards stuck here.
func (e *run) value(stuck []int) []byte {
	return mustValue(memberValue{Count: e.g.count, Identity: e.g.identity, Stuck: stuck})
}

func (e *run) joined(l *core.Lease, rev int64, stuck []int) {
	e.lease, e.leases[l.ID()], e.joinedRev, e.published = l, true, rev, stuck
}

// stuckIDs are the shards whose fn outlived its drain here and still
// runs, sorted.
func (e *run) stuckIDs() []int {
	if len(e.stuck) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(e.stuck))
}

// publish writes the shards stuck here into the member's key when they
// changed, so that every member's assignment gives them to others (this
// member cannot take them while their fn runs). One write at a time,
// guarded by the key's CreateRevision and lease: a rejoin writes its own.
func (e *run) publish() {
	if e.leaving || e.joining || e.publishing || e.lease == nil || e.lease.Context().Err() != nil {
		return
	}
	want := e.stuckIDs()
	if slices.Equal(want, e.published) {
		return
	}
	me, ok := e.v.members[e.member]
	if !ok || me.lease != e.lease.ID() {
		return // a rejoin writes the value
	}
	e.publishing = true
	key, val, l := memberKey(e.g.prefix, e.member), string(e.value(want)), e.lease.ID()
	e.spawn(func() {
		var ok bool
		err := retry.Do(e.ctx, func(actx context.Context) error {
			resp, err := e.g.cli.Txn(clientv3.WithRequireLeader(actx)).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", me.rev), clientv3.Compare(clientv3.LeaseValue(key), "=", l)).
				Then(clientv3.OpPut(key, val, clientv3.WithLease(l))).Commit()
			ok = err == nil && resp.Succeeded
			return err
		})
		e.send(func() {
			e.publishing = false
			switch {
			case ok:
				e.published = want
			case err != nil && e.ctx.Err() == nil:
				e.g.cfg.Session.Logger.Warn("shard: cannot name the stuck shards in the member's key; retrying at the next change", e.fields(zap.Ints("stuck", want), zap.Error(err))...)
			}
		})
	})
}

// spawn runs fn in a goroutine the loop waits for before Run returns.
func (e *run) spawn(fn func()) {
	e.wg.Add(1)
	go func() { defer e.wg.Done(); fn() }()
}

// loop follows the group's keys and the member's shards until Run ends.
func (e *run) loop() error {
	g := e.g
	defer func() {
		for _, l := range e.local { // only timers and AfterFuncs remain
			e.stopTimers(l)
		}
		if e.leaseStop != nil {
			e.leaseStop() // a shared lease outlives the Run
		}
		close(e.dead)
		e.wg.Wait()
		e.met.Forget()
	}()
	var wch clientv3.WatchChan
	wcancel := func() {}
	defer func() { wcancel() }()
	watch := func() {
		wcancel()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(e.ctx))
		wcancel = cancel
		wch = g.cli.Watch(wctx, g.prefix, clientv3.WithPrefix(), clientv3.WithRev(e.v.rev+1))
	}
	watch()
	e.watchLease()
	e.reconcile()
	done := e.ctx.Done()
	for {
		if e.leaving && len(e.local) == 0 && !e.joining && e.departing == 0 {
			return e.result()
		}
		dirty := false
		select {
		case f := <-e.events:
			f()
			dirty = true
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if e.leaving {
					wcancel()
					wch = nil
					continue
				}
				if !e.reread() {
					continue
				}
				watch()
			} else {
				e.apply(wr)
			}
			dirty = true
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
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					if e.leaving {
						wcancel()
						wch = nil
					} else if e.reread() {
						watch()
					}
					break more
				}
				e.apply(wr)
			default:
				break more
			}
		}
		if dirty {
			e.reconcile()
		}
	}
}

// reread reads the group after a broken watch; false when Run ends.
func (e *run) reread() bool {
	v, err := e.g.read(e.ctx)
	if err != nil {
		if e.ctx.Err() == nil && retry.Permanent(err) {
			e.fail(fmt.Errorf("read group %q: %w", e.g.name, err))
		}
		e.leave()
		return false
	}
	e.v = v
	clear(e.vacated)
	return true
}

// apply takes one watch response into the view, and notes the shards
// whose owner's key went (for the move metrics).
func (e *run) apply(wr clientv3.WatchResponse) {
	type gone struct {
		id  int
		c   contender
		rev int64
	}
	var vacated []gone
	left := map[string]int64{}
	for _, ev := range wr.Events {
		key := string(ev.Kv.Key)
		if ev.Type == mvccpb.DELETE {
			p := parseKey(e.v.prefix, key)
			if p.kind == 'm' {
				if m, ok := e.v.members[p.member]; ok {
					left[p.member+"\x00"+fmt.Sprint(int64(m.lease))] = ev.Kv.ModRevision
				}
			}
			if p.kind == 's' && p.shard < e.v.count {
				if h, ok := e.v.head(p.shard); ok && h.key == key {
					vacated = append(vacated, gone{p.shard, h, ev.Kv.ModRevision})
				}
			}
			e.v.del(key)
			continue
		}
		if s := e.v.put(ev.Kv); s >= 0 {
			if h, ok := e.v.head(s); ok && h.key == key && !e.leases[h.lease] {
				delete(e.vacated, s) // another member took it
			}
		}
	}
	e.v.rev = wr.Header.Revision
	now := time.Now()
	for _, v := range vacated {
		if e.leases[v.c.lease] {
			continue // this member's own release
		}
		reason := metrics.MoveJoin
		if rev, ok := left[v.c.member+"\x00"+fmt.Sprint(int64(v.c.lease))]; ok && rev == v.rev {
			reason = metrics.MoveLoss // the member's key went in the same revision: its lease
		} else if m, ok := e.v.members[v.c.member]; !ok || m.lease != v.c.lease {
			reason = metrics.MoveLeave
		}
		if l := e.local[v.id]; l != nil && l.pending {
			l.pending = false
			e.met.Moved(reason, 0) // the work started before this member saw the key go
			continue
		}
		e.vacated[v.id] = vacancy{at: now, reason: reason}
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
	in := ok && e.lease != nil && me.lease == e.lease.ID() && e.lease.Context().Err() == nil && !e.leaving
	if !in && !e.leaving && !e.joining {
		e.rejoin()
	}
	e.target = e.v.target()
	for id, to := range e.target {
		mine := in && to == e.member
		l := e.local[id]
		switch {
		case l == nil && mine:
			e.acquire(id)
		case l == nil || mine:
		case l.phase == acquiring:
			l.cancel()
		case l.phase == running && e.v.rev >= int64(l.sh.Token()) && !e.v.has(id, l.sh.Key()):
			// The view saw its key made and gone (a revoke, a delete)
			// before the hold heard: a loss, with the hold's cause, not a move.
			l.sh.cancel(errs.Lost(errs.ErrKeyGone))
		case l.phase == running && e.leaseEnded(l.sh) != nil:
			// Its lease ended before the session ended its hold: the
			// lease's cause (a loss), as the hold's will be, not a move.
			l.sh.cancel(e.leaseEnded(l.sh))
		case l.phase == running:
			e.h.moving.call(id)
			l.sh.cancel(ErrMoved)
		}
	}
	e.publish()
	e.h.acted.call(e.v.rev)
}

// leaseEnded is the cause of the end of the lease sh is held on, if that
// is the member's lease and it ended; nil otherwise.
func (e *run) leaseEnded(sh *Shard) error {
	if l := e.lease; l != nil && l.ID() == sh.Lease() && l.Context().Err() != nil {
		return context.Cause(l.Context())
	}
	return nil
}

// wants says whether the last assignment gives shard id to this member.
func (e *run) wants(id int) bool {
	return !e.leaving && e.target != nil && e.target[id] == e.member && e.lease != nil && e.lease.Context().Err() == nil
}

// rejoin joins again on the session's next lease, in the background.
func (e *run) rejoin() {
	e.joining = true
	prev, leases, stuck := e.lease, maps.Clone(e.leases), e.stuckIDs()
	e.spawn(func() {
		_, l, rev, err := e.join(e.ctx, prev, leases, stuck)
		e.send(func() {
			e.joining = false
			switch {
			case err == nil && e.leaving:
				e.depart(l) // Run ended while it joined again: leave is done already
			case errors.As(err, new(*keyStays)):
				e.keyStays(err)
			case err == nil:
				e.joined(l, rev, stuck)
				e.watchLease()
			case e.ctx.Err() != nil:
			case errors.Is(err, ErrCountMismatch), errors.Is(err, ErrDuplicateMember), errors.Is(err, ErrSessionClosed), errors.Is(err, ErrClosed), retry.Permanent(err):
				// A caller's session that ended is never replaced: Run ends with it.
				e.fail(err)
			default:
				e.g.cfg.Session.Logger.Warn("shard: cannot join the group again; retrying", e.fields(zap.Error(err))...)
				e.spawn(func() {
					if retry.Sleep(e.ctx, time.Second) == nil {
						e.send(func() {})
					}
				})
			}
		})
	})
}

// watchLease makes the loop reconcile when the member's lease ends.
func (e *run) watchLease() {
	if e.leaseStop != nil {
		e.leaseStop()
	}
	if l := e.lease; l != nil {
		e.leaseStop = context.AfterFunc(l.Context(), func() { e.send(func() {}) })
	}
}

func (e *run) acquire(id int) {
	actx, cancel := context.WithCancel(e.ctx)
	l := &local{id: id, phase: acquiring, cancel: cancel}
	e.local[id] = l
	o := e.g.owner(id)
	count, member := e.g.count, e.member
	e.spawn(func() {
		sh, err := o.Acquire(actx, core.Request{Value: member}, func(h *core.Hold) *Shard { return newShard(h, id, count, member) })
		e.send(func() { e.acquired(l, sh, err) })
	})
}

func (e *run) acquired(l *local, sh *Shard, err error) {
	l.cancel()
	if err != nil {
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
		e.rest(l)
		return
	}
	e.atCap = false
	l.sh = sh
	if !e.wants(l.id) {
		sh.cancel(ErrMoved)
		l.fnDone = true
		e.release(l)
		return
	}
	l.phase, l.owned = running, true
	e.owned++
	e.met.SetOwned(e.owned)
	if v, ok := e.vacated[l.id]; ok {
		delete(e.vacated, l.id)
		e.met.Moved(v.reason, time.Since(v.at))
	} else {
		l.pending = true
	}
	l.stop = context.AfterFunc(sh.ctx, func() { e.send(func() { e.ended(l) }) })
	e.spawn(func() {
		err := e.fn(sh.ctx, sh)
		e.send(func() { e.returned(l, err) })
	})
}

// ended: the Shard's Context ended (moved, lost or released): drain.
func (e *run) ended(l *local) {
	if l.phase != running || e.local[l.id] != l {
		return
	}
	l.phase = draining
	if l.fnDone || planted.On("m") {
		e.release(l)
		return
	}
	l.timer = time.AfterFunc(e.g.drain, func() {
		e.send(func() {
			if l.phase == draining && e.local[l.id] == l {
				e.g.cfg.Session.Logger.Warn("shard: work did not return within the drain timeout; releasing the shard", e.fields(zap.Int("shard", l.id), zap.Duration("drain", e.g.drain))...)
				e.release(l)
			}
		})
	})
}

// returned: fn returned err.
func (e *run) returned(l *local, err error) {
	l.fnDone = true
	ctx := l.sh.ctx
	if err != nil && !(ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.Cause(ctx)))) {
		e.fail(fmt.Errorf("shard %d: %w", l.id, err))
	}
	switch l.phase {
	case running: // still owned, unless its Context ended before the loop heard
		l.again = err == nil && ctx.Err() == nil
		l.sh.cancel(ErrReleased)
		e.release(l)
	case draining:
		e.release(l)
	case zombie:
		delete(e.stuck, l.id)
		e.g.cfg.Session.Logger.Info("shard: work returned after its drain timeout; the shard may be taken here again", e.fields(zap.Int("shard", l.id))...)
		e.finish(l)
	}
}

// release deletes the shard's key, once its fn returned or the drain
// timed out.
func (e *run) release(l *local) {
	e.stopTimers(l)
	l.phase = releasing
	if l.owned {
		l.owned = false
		e.owned--
		e.met.SetOwned(e.owned)
	}
	h := e.h
	e.spawn(func() {
		h.releasing.call(l.id)
		err := core.Release(context.Background(), l.sh.hold)
		e.send(func() { e.released(l, err) })
	})
}

func (e *run) released(l *local, err error) {
	if err != nil && !errors.Is(err, ErrNotHeld) {
		e.g.cfg.Session.Logger.Warn("shard: release failed", e.fields(zap.Int("shard", l.id), zap.Error(err))...)
	}
	if !l.fnDone {
		l.phase = zombie // its fn keeps the shard from being taken here again: others take it
		e.stuck[l.id] = true
		return
	}
	e.finish(l)
}

func (e *run) finish(l *local) {
	if l.again {
		e.rest(l)
		return
	}
	e.stopTimers(l)
	delete(e.local, l.id)
}

// rest keeps shard l from being tried again for a while.
func (e *run) rest(l *local) {
	if e.leaving {
		delete(e.local, l.id)
		return
	}
	l.phase, l.again = resting, false
	l.timer = time.AfterFunc(rest, func() {
		e.send(func() {
			if l.phase == resting && e.local[l.id] == l {
				delete(e.local, l.id)
			}
		})
	})
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

// fail ends Run with err (the first one wins).
func (e *run) fail(err error) {
	if e.err == nil {
		e.err = err
	}
	e.stop(err)
	e.leave()
}

// leave deletes the member's key, then ends every shard: the others queue
// on them at once and take each over as it is released.
func (e *run) leave() {
	if e.leaving {
		return
	}
	e.leaving = true
	if l := e.lease; l != nil && l.Context().Err() == nil {
		e.depart(l)
	}
	e.h.left.call()
	for _, l := range e.local {
		switch l.phase {
		case acquiring:
			l.cancel()
		case running:
			l.sh.cancel(ErrReleased)
		case resting:
			e.stopTimers(l)
			delete(e.local, l.id)
		}
	}
}

// depart deletes the member's key from lease l: a first attempt here
// (leaveTimeout at most, whatever Run's ctx), then, if etcd did not
// answer, again in the background until it does or the lease ends; Run
// returns only after. A key left behind would make every other member
// assign shards to a member nobody runs for as long as the lease lives (a
// shared session's).
func (e *run) depart(l *core.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), leaveTimeout)
	err := e.unjoin(ctx, l)
	cancel()
	switch {
	case err == nil:
	case retry.Permanent(err):
		e.keyStays(e.stays(l, err))
	default:
		e.departing++
		e.spawn(func() {
			err := e.unjoinUntilDone(l)
			e.send(func() {
				e.departing--
				if err != nil {
					e.keyStays(err)
				}
			})
		})
	}
}

// keyStays records that the member's key could not be deleted (a
// *keyStays): Run returns it, beside any error it had already.
func (e *run) keyStays(stays error) {
	if e.err == nil {
		e.err = stays
	} else {
		e.err = errors.Join(e.err, stays)
	}
}

// keyStays is Run's error when the member's key could not be deleted.
type keyStays struct {
	member, group string
	lease         clientv3.LeaseID
	err           error
}

func (k *keyStays) Error() string {
	return fmt.Sprintf("shard: member %q of group %q: its member key could not be deleted (%v); it stays until lease %x ends", k.member, k.group, k.err, int64(k.lease))
}

func (k *keyStays) Unwrap() error { return k.err }

func (e *run) stays(l *core.Lease, err error) error {
	return &keyStays{member: e.member, group: e.g.name, lease: l.ID(), err: err}
}

// unjoinUntilDone deletes the member's key from lease l, retrying until
// etcd answers, the lease ends (the key goes with it), or Close of the
// Group that made the lease began (Close revokes it); it returns a
// *keyStays if etcd refused for good.
func (e *run) unjoinUntilDone(l *core.Lease) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.ctx))
	defer cancel()
	defer context.AfterFunc(l.Context(), cancel)()
	if e.g.own {
		defer context.AfterFunc(e.g.ctx, cancel)()
	}
	for attempt := 0; ; attempt++ {
		err := e.unjoin(ctx, l)
		switch {
		case err == nil, ctx.Err() != nil:
			return nil
		case retry.Permanent(err):
			return e.stays(l, err)
		}
		if retry.Sleep(ctx, retry.Backoff(attempt)) != nil {
			return nil
		}
	}
}

// unjoin deletes the member's key if it is on lease l.
func (e *run) unjoin(ctx context.Context, l *core.Lease) error {
	key := memberKey(e.g.prefix, e.member)
	return retry.Do(ctx, func(actx context.Context) error {
		_, err := e.g.cli.Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", l.ID())).Then(clientv3.OpDelete(key)).Commit()
		return err
	})
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
