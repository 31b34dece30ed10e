// Package queue is the etcd side of one queue of keys under a prefix, the
// oldest holding: its reads, the wait for deletions, a guarded delete.
package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// ErrOwnKeyGone is returned when the waiter's own key was deleted.
var ErrOwnKeyGone = errors.New("own key gone while waiting")

// Policy decides when a key that is not exclusive (a permit, a read lock)
// may hold. Older keys only ever go, so a key that may hold keeps that right.
type Policy interface {
	// Blockers returns those of older (the keys created before own, oldest
	// first) that keep own from holding while more than allowed remain.
	Blockers(own string, older []*mvccpb.KeyValue) (blockers []*mvccpb.KeyValue, allowed int)
}

// Position is how many keys were ahead of ours, created at rev, in
// the read of the transaction that put it: without a Policy that read is
// limited, but its Count is the whole queue's, ours the newest.
func Position(p Policy, read *etcdserverpb.RangeResponse, rev int64) int {
	if p == nil {
		return max(int(read.GetCount())-1, 0)
	}
	n := 0
	for _, kv := range read.GetKvs() {
		if kv.CreateRevision < rev {
			n++
		}
	}
	return n
}

// Read is the enqueue's read: the queue for a Policy, else beside a put
// the newest keys (ours and, up to MaxRead in all, those ahead of it), else
// the oldest.
func Read(prefix string, p Policy, put bool) clientv3.Op {
	switch {
	case p != nil:
		return clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	case put:
		return clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(MaxRead))
	}
	return clientv3.OpGet(prefix, clientv3.WithFirstCreate()...)
}

// MaxRead bounds the keys an exclusive enqueue reads: with at most this
// many in the queue its waiter knows every key ahead and, following the
// session's watch, holds on the last one's deletion without reading again.
const MaxRead = 32

// Enqueue puts key on lease with value unless it exists (one that exists
// is the caller's: reserved, a lost reply's or an earlier run's, so this is
// safe to retry) and if conds hold, and reads the queue beside it. The
// lease's fence (fkey, in f) voids it once a cleanup raised it. unheard
// says an attempt failed without an answer: it may still apply, even when
// a later one was refused. b, when not nil, groups it with the session's
// other enqueues sent meanwhile.
func Enqueue(ctx context.Context, cli *clientv3.Client, b *Batcher, f *Fence, fkey string, lease clientv3.LeaseID, key, value, prefix string, p Policy, conds []clientv3.Cmp) (resp *clientv3.TxnResponse, unheard bool, err error) {
	err = retry.Do(ctx, func(actx context.Context) (err error) {
		// Without the reads that explain a refusal first: each is a part of
		// every enqueue's raft entry, and a refusal is rare.
		for _, why := range []bool{false, true} {
			cmps, then, els, v := enqueueOps(f, fkey, lease, key, value, prefix, p, conds, why)
			if b != nil {
				resp, err = b.commit(actx, lease, prefix, len(key)+len(value), cmps, then, els)
			} else {
				resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).If(cmps...).Then(then...).Else(els...).Commit()
			}
			unheard = unheard || (err != nil && !retry.Permanent(err) && !errors.Is(err, ErrNotSent))
			switch {
			case err != nil || resp.Succeeded:
				return err
			case why && len(resp.Responses[0].GetResponseRange().Kvs) == 0 &&
				f.Moved(fkey, v, resp.Responses[2].GetResponseRange().Kvs, resp.Header.Revision):
				return retry.ErrAgain
			}
		}
		return nil
	})
	if err == nil && unheard && !planted.On("w") { // void the unheard attempt before the key is used
		err = retry.Do(ctx, func(actx context.Context) error { return f.Raise(actx, cli, lease, fkey) })
	}
	return resp, unheard, err
}

// EnqueueTxn is one attempt of Enqueue as sent alone, and the fence
// version it compares; why adds the reads that tell a refusal's cause (the
// key, the oldest key, the fence).
func EnqueueTxn(ctx context.Context, cli *clientv3.Client, f *Fence, fkey string, lease clientv3.LeaseID, key, value, prefix string, p Policy, conds []clientv3.Cmp, why bool) (clientv3.Txn, int64) {
	cmps, then, els, v := enqueueOps(f, fkey, lease, key, value, prefix, p, conds, why)
	return cli.Txn(clientv3.WithRequireLeader(ctx)).If(cmps...).Then(then...).Else(els...), v
}

// enqueueOps are the compares and branches of one attempt.
func enqueueOps(f *Fence, fkey string, lease clientv3.LeaseID, key, value, prefix string, p Policy, conds []clientv3.Cmp, why bool) (cmps []clientv3.Cmp, then, els []clientv3.Op, v int64) {
	if p == nil && len(conds) == 0 && !why {
		e := f.plain(fkey, lease, key, value, prefix)
		return e.cmps, e.then, nil, e.v
	}
	fence, v := f.Cmp(fkey)
	cmps = append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0), fence}, conds...)
	then = []clientv3.Op{clientv3.OpPut(key, value, clientv3.WithLease(lease)), Read(prefix, p, true)}
	if why {
		els = []clientv3.Op{clientv3.OpGet(key), Read(prefix, p, false), FenceGet(fkey)}
	}
	return cmps, then, els, v
}

// MayHold tells from the enqueue's read whether key, created at rev, holds;
// if not, it returns what blocks it when the read tells (nil: read again)
// and whether those are every key ahead (complete: their deletions alone
// tell when key holds).
func MayHold(p Policy, read *etcdserverpb.RangeResponse, put bool, key string, rev int64) (ok bool, blockers []*mvccpb.KeyValue, allowed int, complete bool) {
	kvs := read.GetKvs()
	switch {
	case p != nil:
		older := slices.DeleteFunc(slices.Clone(kvs), func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision >= rev })
		b, allowed := p.Blockers(key, older)
		return len(b) <= allowed, b, allowed, true
	case planted.On("k") && len(kvs) > 0 && kvs[0].CreateRevision == rev && keys.TagOf(key) == "":
		kvs = slices.DeleteFunc(slices.Clone(kvs), func(kv *mvccpb.KeyValue) bool { return keys.TagOf(string(kv.Key)) == keys.TagSet })
		return len(kvs) == 1, kvs[1:], 0, false
	case len(kvs) == 0 || kvs[0].CreateRevision != rev:
		return false, nil, 0, false // not the read expected: wait reads again
	case !put || len(kvs) == 1:
		return true, nil, 0, true
	}
	return false, kvs[1:], 0, read.Count == int64(len(kvs)) // newest first
}

// Deletions is a watch already running over the queue's namespace (the
// session's, package watch), followed instead of a watch of one's own.
type Deletions interface {
	Follow(keys []string, read int64, f func(key string, at int64, released bool)) (stop func(), ok bool)
}

// WaitGone is the one wait for deletions after read, until at most allowed
// of blockers remain: it follows d when d covers them, else it watches the
// queue (prefix) or the first blocker alone from the current revision,
// which etcd serves at once. Done means that happened at the revision
// returned; not done, read again (at that revision, if any). Released says
// every deletion the wait used was a holder's release: through d (a
// revision that deleted one key and one mark, watch.marks), or read at the
// deletion's revision (markedAt: a mark put then, own key kept) when the
// one key watched was the last ahead (done; a wait that reads the queue
// again would not use it). Verify asks the read through d too, for a
// caller that holds on released alone where its blockers are not every
// key ahead: a range delete or a revoke can delete one key and a mark,
// but puts no mark.
func WaitGone(ctx context.Context, cli *clientv3.Client, d Deletions, queue, own string, prefix bool, blockers []*mvccpb.KeyValue, allowed int, read int64, verify bool) (at int64, done, released bool, err error) {
	at, done, released, err = waitGone(ctx, cli, d, queue, own, prefix, blockers, allowed, read, verify)
	if planted.On("v") && err == nil && done && !prefix {
		err = retry.Sleep(ctx, plantedSlowWait) // the deletion that frees the lock ignored a while
	}
	return at, done, released, err
}

// plantedSlowWait is planted bug v's.
const plantedSlowWait = 6 * time.Second

func waitGone(ctx context.Context, cli *clientv3.Client, d Deletions, queue, own string, prefix bool, blockers []*mvccpb.KeyValue, allowed int, read int64, verify bool) (at int64, done, released bool, err error) {
	left := make(map[string]int64, len(blockers))
	for _, kv := range blockers {
		left[string(kv.Key)] = kv.CreateRevision
	}
	if d != nil {
		if at, done, released, err, ok := follow(ctx, d, own, left, allowed, read); ok {
			if released && verify {
				released = len(blockers) == 1 && markedAt(ctx, cli, own, at)
			}
			return at, done, released, err
		}
	}
	whole := prefix || len(blockers) == 1 // the watch below sees every blocker go
	watch, opts := string(blockers[0].Key), []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
	if prefix {
		watch, opts = queue, append(opts, clientv3.WithPrefix())
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, watch, opts...) {
		if err := wr.Err(); err != nil {
			if retry.Permanent(err) {
				return 0, false, false, err
			}
			break
		}
		if wr.Created && wr.Header.Revision > read {
			if prefix {
				return wr.Header.Revision, false, false, nil
			}
			// One key: read it (a serializable read at or after the watch's
			// start will do) and keep this watch if it is still there.
			at, gone, err := goneSince(ctx, cli, blockers[0], wr.Header.Revision)
			if err != nil || gone {
				return at, gone && whole, false, nil
			}
		}
		at := int64(0)
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= read {
				continue // a member behind our read delivers an earlier incarnation's deletion
			}
			if k == own {
				return 0, false, false, ErrOwnKeyGone
			}
			delete(left, k)
			at = max(at, ev.Kv.ModRevision)
		}
		if at > 0 && (!whole || len(left) <= allowed) {
			return at, whole, !prefix && markedAt(ctx, cli, own, at), nil
		}
	}
	if ctx.Err() != nil {
		return 0, false, false, context.Cause(ctx)
	}
	return 0, false, false, retry.Sleep(ctx, 50*time.Millisecond)
}

// follow is WaitGone through d; ok is false when d does not cover the wait.
func follow(ctx context.Context, d Deletions, own string, left map[string]int64, allowed int, read int64) (at int64, done, released bool, err error, ok bool) {
	ks := []string{own}
	for k := range left {
		ks = append(ks, k)
	}
	type ending struct {
		at       int64 // the revision that ended the wait; 0: stream broken, -1: own key gone
		released bool
	}
	ch := make(chan ending, 1)
	last := ending{released: true} // released: every deletion the wait used was marked
	end := func(e ending) {
		select {
		case ch <- e:
		default: // ended already
		}
	}
	stop, ok := d.Follow(ks, read, func(k string, rev int64, rel bool) { // serial, under d's lock
		switch _, blocks := left[k]; {
		case rev == 0:
			end(ending{})
		case k == own:
			end(ending{at: -1})
		case blocks:
			delete(left, k)
			last = ending{max(last.at, rev), last.released && rel}
			if len(left) <= allowed {
				end(last)
			}
		}
	})
	if !ok {
		return 0, false, false, nil, false
	}
	defer stop()
	select {
	case e := <-ch:
		switch {
		case e.at == 0:
			return 0, false, false, nil, true
		case e.at < 0:
			return 0, false, false, ErrOwnKeyGone, true
		}
		return e.at, true, e.released, nil, true
	case <-ctx.Done():
		return 0, false, false, context.Cause(ctx), true
	}
}

// markedAt reads whether revision at, which deleted the key the wait was
// for, also put one of the namespace's release marks
// (Release): the key was its holder's, released by it; and whether own
// outlived it (a hand-over that skips a waiter deletes its key in the same
// revision: it must not take the leader's release for its turn). One
// transaction of point reads at that revision; false when unsure.
func markedAt(ctx context.Context, cli *clientv3.Client, own string, at int64) bool {
	r, err := cli.Txn(clientv3.WithRequireLeader(ctx)).Then(
		clientv3.OpGet(keys.ReleasedKey(own), clientv3.WithRev(at), clientv3.WithKeysOnly()),
		clientv3.OpGet(keys.ReleasedAltKey(own), clientv3.WithRev(at), clientv3.WithKeysOnly()),
		clientv3.OpGet(own, clientv3.WithRev(at), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return false
	}
	putAt := func(kvs []*mvccpb.KeyValue) bool { return len(kvs) == 1 && kvs[0].ModRevision == at }
	a, b, kept := r.Responses[0].GetResponseRange().Kvs, r.Responses[1].GetResponseRange().Kvs, r.Responses[2].GetResponseRange().Kvs
	return (putAt(a) || putAt(b)) && len(kept) == 1
}

// goneSince reads whether kv's key is gone at a revision from or later.
func goneSince(ctx context.Context, cli *clientv3.Client, kv *mvccpb.KeyValue, from int64) (int64, bool, error) {
	g, err := cli.Get(clientv3.WithRequireLeader(ctx), string(kv.Key), clientv3.WithKeysOnly(), clientv3.WithSerializable())
	if err == nil && g.Header.Revision < from {
		g, err = cli.Get(clientv3.WithRequireLeader(ctx), string(kv.Key), clientv3.WithKeysOnly())
	}
	if err != nil {
		return 0, false, err
	}
	return g.Header.Revision, len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != kv.CreateRevision, nil
}

// Release is a holder's release of key, the ops under its guard: the
// deletion and, when mark, in the same revision, the deletion of the
// namespace's release mark that exists and a put of the other
// (keys.ReleasedKey, keys.ReleasedAltKey), which tells waiters that its
// holder knew first: a watch that carries deletions only sees the mark's.
// A holder alone in its queue at its CreateRevision rev marks only if a
// key came after it, decided in the transaction: with nobody to tell, an
// uncontended release is one deletion, as raw etcd's; every waiter's key
// came after, so none is left without its mark.
func Release(key string, mark, alone bool, rev int64) []clientv3.Op {
	if !mark {
		return []clientv3.Op{clientv3.OpDelete(key)}
	}
	toggle, branch := toggleOf(key)
	if alone { // etcd evaluates every compare before it applies an op
		// CreateRevision(queue) < rev+1 over the prefix, built as etcd's
		// message: clientv3's Compare and WithPrefix copy it once each.
		queue := key[:strings.LastIndexByte(key, '/')+1]
		later := clientv3.FromCompare(&etcdserverpb.Compare{Result: etcdserverpb.Compare_LESS, Target: etcdserverpb.Compare_CREATE,
			Key: []byte(queue), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(queue)), TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: rev + 1}})
		toggle = clientv3.OpTxn([]clientv3.Cmp{later}, nil, branch)
	}
	return []clientv3.Op{clientv3.OpDelete(key), toggle}
}

// toggles holds each namespace's mark toggle, built once: an Op is not
// changed by a transaction that sends it (clientv3 copies its compares and
// converts its ops), so one serves every release, concurrently. Bounded:
// past maxToggles namespaces a toggle is built per release, as before.
var toggles struct {
	sync.RWMutex
	m map[string][]clientv3.Op // the toggle alone
}

const maxToggles = 64

// toggleOf is the namespace of key's toggle of its two release marks
// (delete the one that exists, put the other), and a slice of it alone,
// the branch of a release that may be alone: neither is changed by anyone.
func toggleOf(key string) (clientv3.Op, []clientv3.Op) {
	ns := keys.NamespaceOf(key)
	toggles.RLock()
	ops, ok := toggles.m[ns]
	toggles.RUnlock()
	if ok {
		return ops[0], ops
	}
	a, b := keys.ReleasedKey(key), keys.ReleasedAltKey(key)
	ops = []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Version(a), ">", 0)},
		[]clientv3.Op{clientv3.OpDelete(a), clientv3.OpPut(b, "")},
		[]clientv3.Op{clientv3.OpDelete(b), clientv3.OpPut(a, "")})}
	toggles.Lock()
	if toggles.m == nil {
		toggles.m = make(map[string][]clientv3.Op)
	}
	if len(toggles.m) < maxToggles {
		toggles.m[strings.Clone(ns)] = ops
	}
	toggles.Unlock()
	return ops[0], ops
}

// DeleteOnce deletes key if its CreateRevision is *rev (0: read it first);
// also, if not nil, gives ops of the same transaction that run whether or
// not the key was still there.
func DeleteOnce(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, key string, rev *int64, also func(rev int64) []clientv3.Op) error {
	ctx, cancel := context.WithTimeout(ctx, 2*retry.AttemptTimeout)
	defer cancel()
	if *rev == 0 {
		g, err := cli.Get(clientv3.WithRequireLeader(ctx), key)
		if err != nil || len(g.Kvs) == 0 || clientv3.LeaseID(g.Kvs[0].Lease) != lease {
			return err
		}
		*rev = g.Kvs[0].CreateRevision
	}
	guard := clientv3.Compare(clientv3.CreateRevision(key), "=", *rev)
	if also == nil {
		_, err := cli.Txn(clientv3.WithRequireLeader(ctx)).If(guard).Then(clientv3.OpDelete(key)).Commit()
		return err
	}
	ops := append([]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{guard}, []clientv3.Op{clientv3.OpDelete(key)}, nil)}, also(*rev)...)
	_, err := cli.Txn(clientv3.WithRequireLeader(ctx)).Then(ops...).Commit()
	return err
}

// ReadAhead reads the keys older than key (created at rev: without a
// Policy the newest of them, with one all) and key itself, serializably
// when minRev > 0. A member without a leader refuses rather than answer
// from a state that may be stale. Keys only: etcd sorts a read by
// CreateRevision after visiting every key of the prefix, which it does in
// its index alone when no value is asked for.
func ReadAhead(ctx context.Context, cli *clientv3.Client, prefix, key string, rev int64, p Policy, minRev int64) (resp *clientv3.TxnResponse, err error) {
	older := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly())
	if p != nil {
		older = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(rev - 1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	}
	own := []clientv3.OpOption{clientv3.WithKeysOnly()}
	if minRev > 0 {
		older, own = append(older, clientv3.WithSerializable()), append(own, clientv3.WithSerializable())
	}
	err = retry.Reads(ctx, func(actx context.Context) (err error) {
		resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).Then(clientv3.OpGet(prefix, older...), clientv3.OpGet(key, own...)).Commit()
		return err
	})
	return resp, err
}

// Confirm returns nil once a read of key at or after revision at finds it
// with CreateRevision rev, ErrOwnKeyGone if it does not: a holder told of
// its key's deletion by the event that confirmed the waiter gets that
// round trip's head start (an operator's delete or revoke is told to both
// at once). A member behind at, or without the key, leaves it to the leader.
func Confirm(ctx context.Context, cli *clientv3.Client, key string, rev, at int64) error {
	for _, opts := range [][]clientv3.OpOption{{clientv3.WithKeysOnly(), clientv3.WithSerializable()}, {clientv3.WithKeysOnly()}} {
		var resp *clientv3.GetResponse
		err := retry.Reads(ctx, func(actx context.Context) (err error) {
			resp, err = cli.Get(clientv3.WithRequireLeader(actx), key, opts...)
			return err
		})
		switch {
		case err != nil:
			return err
		case resp.Header.Revision >= at && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == rev:
			return nil
		}
	}
	return ErrOwnKeyGone
}
