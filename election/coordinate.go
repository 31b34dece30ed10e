package election

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
)

// campaignPreferred writes the candidate's record, then leads when it is
// the best candidate and nobody leads, or when a leader hands over to it.
// Keys of Oldest candidates (or etcd's) that were there first are waited
// out, never preempted: that is the way from Oldest to Preferred, and no
// new one can join once a Preferred record exists. docs/design.md walks
// through the protocol.
func (e *Election) campaignPreferred(ctx context.Context, value string) (*Term, error) {
	rec, err := e.putRecord(ctx, value)
	if err != nil {
		return nil, err
	}
	t, err := e.lead(ctx, value, rec)
	if err != nil {
		e.withdraw(rec)
		return nil, err
	}
	e.started(t)
	return t, nil
}

func (e *Election) lead(ctx context.Context, value string, rec *core.Hold) (*Term, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(rec.Context(), func() { cancel(context.Cause(rec.Context())) })()
	lease := rec.Lease()
	own := keys.LeaseKey(e.Prefix(), int64(lease))
	var asked struct {
		leader int64 // the CreateRevision of the leader asked to end its term
		at     time.Time
	}
	var w *changes
	defer func() { w.stop() }()
	handed := false // a watch saw a key put on this candidate's lease
	for {
		if handed {
			t, err := e.take(ctx, value, rec)
			if !errors.Is(err, errNotChosen) {
				return t, err
			}
		}
		if w == nil {
			// Watch before reading, from the current revision: etcd sends
			// the changes of a watch that starts in the past only in
			// batches, every 100 ms.
			var err error
			if w, err = e.watchChanges(ctx); err != nil {
				return nil, err
			}
		}
		st, err := e.readState(ctx)
		if err != nil {
			return nil, err
		}
		me := st.recs[Preferred][lease]
		if me == nil || me.rev != int64(rec.Token()) {
			return nil, errs.Lost(errs.ErrKeyDeleted) // the record went: an operator, or the lease
		}
		leader := st.leader()
		var deadline time.Duration
		switch {
		case leader != nil && string(leader.Key) == own, leader == nil && st.ranked()[0] == me:
			t, err := e.take(ctx, value, rec)
			if !errors.Is(err, errNotChosen) {
				return t, err
			}
			continue
		case leader != nil:
			lrec := st.recs[Preferred][clientv3.LeaseID(leader.Lease)]
			if lrec == nil || !outranks(me.rank(), lrec.rank()) {
				break
			}
			if asked.leader != leader.CreateRevision {
				asked.leader, asked.at = leader.CreateRevision, time.Now()
				if err := e.askToEnd(ctx, leader, me); err != nil {
					return nil, err
				}
			}
			if deadline = e.cand.Deadline - time.Since(asked.at); deadline <= 0 {
				if err := e.preempt(ctx, leader); err != nil {
					return nil, err
				}
				continue
			}
		}
		if handed, err = w.wait(ctx, st.rev, deadline, own); errors.Is(err, errWatchBroken) {
			w.stop()
			w = nil
		} else if err != nil {
			return nil, err
		}
	}
}

// preferredTarget is the live candidate of st whose key (or record key)
// is to, or with to "" the best one, but the leader's (lease); nil if none.
func (e *Election) preferredTarget(st *state, lease clientv3.LeaseID, to string) *entry {
	for _, en := range st.ranked() {
		if en.lease != lease && (to == "" || en.key == to || e.keyOf(en) == to) {
			return en
		}
	}
	return nil
}

// take puts the leader's key on this candidate's lease if nobody leads
// and its record is still the one written, or arms a key a leader handed
// over to it; errNotChosen if neither.
func (e *Election) take(ctx context.Context, value string, rec *core.Hold) (*Term, error) {
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(e.Prefix()), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(rec.Key()), "=", int64(rec.Token())),
	}
	return e.o.Acquire(ctx, core.Request{Value: value, Try: true, If: cmps}, e.wrap(value, rec))
}

// askToEnd writes a request that the leader end its term, on this
// candidate's lease, unless a request newer than the leader's key exists.
func (e *Election) askToEnd(ctx context.Context, leader *mvccpb.KeyValue, me *entry) error {
	key := e.endKey(clientv3.LeaseID(leader.Lease))
	b, _ := json.Marshal(EndRequest{By: me.key, Deadline: e.cand.Deadline.String()})
	return retry.Do(ctx, func(actx context.Context) error {
		_, err := e.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.ModRevision(key), "<", leader.CreateRevision)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(me.lease))).Commit()
		return err
	})
}

// preempt deletes the leader's key (and the request) at the deadline,
// guarded by its CreateRevision. The next best candidate then takes in a
// transaction of its own, so the old leader's watch can tell it first.
func (e *Election) preempt(ctx context.Context, leader *mvccpb.KeyValue) error {
	if f := e.hooks.onPreempt; f != nil {
		f()
	}
	return retry.Do(ctx, func(actx context.Context) error {
		_, err := e.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(string(leader.Key)), "=", leader.CreateRevision)).
			Then(clientv3.OpDelete(string(leader.Key)), clientv3.OpDelete(e.endKey(clientv3.LeaseID(leader.Lease)))).Commit()
		return err
	})
}

// changes are the watches of an election's keys and records.
type changes struct {
	cancel context.CancelFunc
	keys   clientv3.WatchChan
	recs   clientv3.WatchChan
}

var errWatchBroken = errors.New("watch broken")

// watchChanges watches the election's keys and records from the current
// revision and returns once etcd registered both watches.
func (e *Election) watchChanges(ctx context.Context) (*changes, error) {
	for {
		w, err := e.tryWatch(ctx)
		if w != nil || err != nil {
			return w, err
		}
	}
}

func (e *Election) tryWatch(ctx context.Context) (*changes, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	cli := e.o.Client()
	w := &changes{cancel: cancel,
		keys: cli.Watch(wctx, e.Prefix(), clientv3.WithPrefix(), clientv3.WithCreatedNotify()),
		recs: cli.Watch(wctx, e.coord, clientv3.WithPrefix(), clientv3.WithCreatedNotify())}
	for _, ch := range []clientv3.WatchChan{w.keys, w.recs} {
		wr, ok := <-ch
		switch {
		case ctx.Err() != nil:
			cancel()
			return nil, context.Cause(ctx)
		case !ok || wr.Err() != nil && !retry.Permanent(wr.Err()):
			cancel()
			return nil, retry.Sleep(ctx, 50*time.Millisecond)
		case wr.Err() != nil:
			cancel()
			return nil, wr.Err()
		}
	}
	return w, nil
}

func (w *changes) stop() {
	if w != nil {
		w.cancel()
	}
}

// wait returns after the first change after rev, after d (if positive),
// or when ctx ends; handed says a change put own (a hand-over to this
// candidate); errWatchBroken asks for new watches.
func (w *changes) wait(ctx context.Context, rev int64, d time.Duration, own string) (handed bool, err error) {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-w.keys:
		case wr, ok = <-w.recs:
		case <-timer:
			return false, nil
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return false, context.Cause(ctx)
		case ok && wr.Err() != nil && retry.Permanent(wr.Err()):
			return false, wr.Err()
		case !ok || wr.Err() != nil:
			return false, errWatchBroken
		}
		changed := false
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision <= rev {
				continue // seen by the read
			}
			changed = true
			if ev.Type == mvccpb.PUT && string(ev.Kv.Key) == own {
				return true, nil
			}
		}
		if changed {
			return false, nil
		}
	}
}

// withdraw deletes the record of a campaign that ended without a term,
// then a key handed over to it meanwhile (none can be once the record is
// gone).
func (e *Election) withdraw(rec *core.Hold) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = core.Release(ctx, rec)
	key := keys.LeaseKey(e.Prefix(), int64(rec.Lease()))
	resp, err := e.o.Client().Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 || clientv3.LeaseID(resp.Kvs[0].Lease) != rec.Lease() {
		return
	}
	_, _ = e.o.Client().Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", resp.Kvs[0].CreateRevision)).
		Then(clientv3.OpDelete(key)).Commit()
}
