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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// The member's key: joining (and joining again after a loss of the lease),
// naming the shards stuck here, and leaving.

// claims are the member keys Runs in this process use, per session: the
// shard's half of the session's key reservations (internal/core keeps
// what every primitive needs; this only a shard member does). An entry
// lives while its Run does.
var claims = struct {
	sync.Mutex
	m map[claimed]struct{}
}{m: map[claimed]struct{}{}}

type claimed struct {
	sess *core.Session
	key  string
}

// claim reserves key on sess for one Run until free is called; false while
// another Run has it.
func claim(sess *core.Session, key string) (free func(), ok bool) {
	c := claimed{sess, key}
	claims.Lock()
	defer claims.Unlock()
	if _, busy := claims.m[c]; busy {
		return nil, false
	}
	claims.m[c] = struct{}{}
	return func() { claims.Lock(); delete(claims.m, c); claims.Unlock() }, true
}

// join puts the member's key on the session's lease, once the group's live
// members were read and found to agree: same count, no other lease under
// the name. A txn guarded by the members' ModRevision makes the check and
// the put one step. It reads the member keys alone, and a txn that lost to
// another member's join reads them again in its Else branch, so that each
// further attempt costs one round trip (many members joining together must
// not each read every shard key per attempt); the group is read whole
// once, at the put's revision.
func (e *run) join(ctx context.Context, lease *core.Lease, leases map[clientv3.LeaseID]*core.Lease, stuck []int) (*view, *core.Lease, int64, error) {
	g := e.g
	key := memberKey(g.prefix, e.member)
	val := e.value(stuck)
	members, rev, err := g.readMembers(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	for attempt := 0; ; attempt++ {
		var cur *core.Lease
		if lease != nil && lease.Context().Err() == nil {
			cur = lease
		}
		var mine *member
		for name, m := range members {
			if m.value.Count != g.count {
				return nil, nil, 0, fmt.Errorf("%w: group %q's live member %q uses %d shards, this Group %d", ErrCountMismatch, g.name, name, m.value.Count, g.count)
			}
			switch {
			case name == e.member && leases[m.lease] == nil && m.lease != g.sess.LeaseID():
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
		for name, m := range members {
			if name != e.member && m.lease == l.ID() {
				return nil, nil, 0, fmt.Errorf("%w: member %q of group %q runs on this lease already", ErrDuplicateMember, name, g.name)
			}
		}
		if mine != nil && mine.lease == l.ID() && string(val) == string(mustValue(mine.value)) {
			v, err := g.readAt(ctx, rev)
			return v, l, rev, err
		}
		exists := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if mine != nil {
			exists = clientv3.Compare(clientv3.CreateRevision(key), "=", mine.rev)
		}
		var resp *clientv3.TxnResponse
		err = retry.Do(ctx, func(actx context.Context) (err error) {
			resp, err = g.cli.Txn(clientv3.WithRequireLeader(actx)).
				If(exists, clientv3.Compare(clientv3.ModRevision(g.prefix+memberSeg).WithPrefix(), "<", rev+1)).
				Then(clientv3.OpPut(key, string(val), clientv3.WithLease(l.ID()))).
				Else(clientv3.OpGet(g.prefix+memberSeg, clientv3.WithPrefix())).Commit()
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
		// A member joined or changed meanwhile: the Else branch read them.
		members, rev = parseMembers(g.prefix, resp.Responses[0].GetResponseRange().Kvs), resp.Header.Revision
		if err := retry.Sleep(ctx, time.Duration(attempt%4)*5*time.Millisecond); err != nil {
			return nil, nil, 0, err
		}
	}
}

func mustValue(v memberValue) []byte { b, _ := json.Marshal(v); return b }

// value is the member key's value, naming the shards stuck here.
func (e *run) value(stuck []int) []byte {
	if planted.On("s") {
		stuck = nil
	}
	return mustValue(memberValue{Count: e.g.count, Identity: e.g.identity, Stuck: stuck})
}

func (e *run) joined(l *core.Lease, rev int64, stuck []int) {
	e.lease, e.leases[l.ID()], e.joinedRev, e.published = l, l, rev, stuck
}

// stuckIDs are the shards whose fn outlived its drain here and still
// runs, sorted.
func (e *run) stuckIDs() []int {
	if len(e.stuck) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(e.stuck))
}

// settling says whether a shard this member held is still running or
// being drained or released: after a loss, the member joins again only
// once none is (each fn returned, or its drain timed out and the member
// names it stuck), so that the balance never gives it back a shard whose
// fn still runs. Its absence costs the group nothing: the others own
// every shard meanwhile.
func (e *run) settling() bool {
	for _, l := range e.local {
		if (l.phase == running || l.phase == draining || l.phase == releasing) && !l.fnDone {
			return true
		}
	}
	return false
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

// rejoin joins again on the session's next lease, in the background.
func (e *run) rejoin() {
	e.h.rejoining.call()
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
		e.step(l, evGiveUp, nil)
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
