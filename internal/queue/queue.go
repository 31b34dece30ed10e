// Package queue is the etcd side of one queue of keys under a prefix, the
// oldest holding: its reads, the wait for deletions, a guarded delete.
package queue

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/watch"
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

// Deletions is the session's watch stream (package watch), on which a
// wait watches the keys it waits for.
type Deletions interface {
	Follow(own int64, keys []string, f func(watch.Note)) (stop func())
}

// WaitGone is the one wait for deletions: it watches, on the session's
// stream d, the newest allowed+1 of blockers (keys older than the
// waiter's own, read at revision read; more than allowed of them block
// it), since until one of those goes at least allowed+1 remain, and
// returns when one of them is gone, or own (watch ownID, Expect's) is:
// ErrOwnKeyGone. at is the revision that showed it: the
// deletion's own (exact), or that of a read that found it gone (the watch
// began after read). done says at most allowed of blockers remain. at 0:
// the stream broke, read again.
func WaitGone(ctx context.Context, cli *clientv3.Client, d Deletions, own string, ownID int64, blockers []*mvccpb.KeyValue, allowed int, read int64) (at int64, exact, done bool, err error) {
	at, exact, done, err = waitGone(ctx, cli, d, own, ownID, blockers, allowed, read)
	if planted.On("v") && err == nil && at > 0 && allowed == 0 { // heard the key ahead go, whether it was the last ahead or not
		err = retry.Sleep(ctx, plantedSlowWait) // the deletion that frees the lock ignored a while
	}
	return at, exact, done, err
}

// plantedSlowWait is planted bug v's.
const plantedSlowWait = 6 * time.Second

func waitGone(ctx context.Context, cli *clientv3.Client, d Deletions, own string, ownID int64, blockers []*mvccpb.KeyValue, allowed int, read int64) (at int64, exact, done bool, err error) {
	watched := slices.SortedFunc(slices.Values(blockers), func(a, b *mvccpb.KeyValue) int { return cmp.Compare(b.CreateRevision, a.CreateRevision) })
	watched = watched[:min(len(watched), allowed+1)]
	keys := make([]string, len(watched))
	for i, kv := range watched {
		keys[i] = string(kv.Key)
	}
	var (
		mu      sync.Mutex
		created int   // watches running
		from    int64 // the latest revision a watch began after
		gone    int   // watched keys deleted after read
		last    int64 // the latest of those deletions
		seen    = make(map[string]bool, len(keys))
		ended   bool
		lost    bool // own key deleted
		why     error
	)
	signal := make(chan struct{}, 1)
	stop := d.Follow(ownID, keys, func(n watch.Note) { // serial, under d's lock
		mu.Lock()
		defer mu.Unlock()
		switch n.Kind {
		case watch.Created:
			created++
			from = max(from, n.Rev)
		case watch.Deleted:
			if n.Rev <= read || seen[n.Key] {
				return // a member behind our read delivers an earlier incarnation's deletion
			}
			if n.Key == own {
				lost = true
				break
			}
			seen[n.Key] = true
			gone++
			last = max(last, n.Rev)
		case watch.Ended:
			ended, why = true, n.Err
		}
		select {
		case signal <- struct{}{}:
		default:
		}
	})
	defer stop()
	covered := false // the gap between read and the watches' start was read
	for {
		select {
		case <-signal:
		case <-ctx.Done():
			return 0, false, false, context.Cause(ctx)
		}
		mu.Lock()
		n, at, run, ended, lost, why, start := gone, last, created == len(keys), ended, lost, why, from
		mu.Unlock()
		switch {
		case lost:
			return 0, false, false, ErrOwnKeyGone
		case n > 0:
			return at, true, len(blockers)-n <= allowed, nil
		case ended && why != nil && retry.Permanent(why):
			return 0, false, false, why
		case ended:
			return 0, false, false, retry.Sleep(ctx, 50*time.Millisecond)
		case run && !covered:
			covered = true
			if start <= read || planted.On("l") { // l: the gap left unread
				continue
			}
			// A deletion between read and the watches' start: read them (a
			// serializable read at or after the start will do).
			at, n, err := goneSince(ctx, cli, watched, start)
			if err != nil {
				return 0, false, false, retry.Failure(ctx, err)
			}
			if n > 0 {
				return at, false, len(blockers)-n <= allowed, nil
			}
		}
	}
}

// AfterDeletion reads own, the waiter's key created at rev, after the
// deletion at revision at of a key ahead of it: ErrOwnKeyGone unless it is
// there. So a holder told of an operator's delete or revoke by the same
// event gets this round trip's head start. When exact (at is the
// deletion's own revision) it also reads whether at was a holder's
// release: one of the namespace's release marks put at at (Release), and
// own kept through it (a hand-over that skips a waiter deletes its key in
// the same revision: it must not take the leader's release for its turn).
// One transaction of point reads, serializable from a member at or past
// at, else the leader's.
func AfterDeletion(ctx context.Context, cli *clientv3.Client, own string, rev, at int64, exact bool) (released bool, err error) {
	for _, serial := range []bool{true, false} {
		opts := []clientv3.OpOption{clientv3.WithKeysOnly()}
		if serial {
			opts = append(opts, clientv3.WithSerializable())
		}
		ops := []clientv3.Op{clientv3.OpGet(own, opts...)}
		if exact {
			atRev := append(slices.Clip(opts), clientv3.WithRev(at))
			ops = append(ops, clientv3.OpGet(keys.ReleasedKey(own), atRev...), clientv3.OpGet(keys.ReleasedAltKey(own), atRev...), clientv3.OpGet(own, atRev...))
		}
		var resp *clientv3.TxnResponse
		err = retry.Reads(ctx, func(actx context.Context) (err error) {
			resp, err = cli.Txn(retry.Leader(actx)).Then(ops...).Commit()
			return err
		})
		switch {
		case err != nil && exact && errors.Is(err, rpctypes.ErrCompacted):
			return AfterDeletion(ctx, cli, own, rev, at, false) // unsure: not a release
		case err != nil && serial && ctx.Err() == nil:
			continue // a member behind at (a future revision to it): ask the leader
		case err != nil:
			return false, err
		case resp.Header.Revision < at:
			continue
		}
		now := resp.Responses[0].GetResponseRange().Kvs
		if len(now) != 1 || now[0].CreateRevision != rev {
			if serial {
				continue // a member without it leaves it to the leader
			}
			return false, ErrOwnKeyGone
		}
		if !exact {
			return false, nil
		}
		putAt := func(kvs []*mvccpb.KeyValue) bool { return len(kvs) == 1 && kvs[0].ModRevision == at }
		a, b, kept := resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs, resp.Responses[3].GetResponseRange().Kvs
		if planted.On("f") { // every deletion taken for a holder's release
			return true, nil
		}
		return (putAt(a) || putAt(b)) && len(kept) == 1 && kept[0].CreateRevision == rev, nil
	}
	return false, ErrOwnKeyGone
}

// goneSince reads kvs' keys at a revision from or later: how many are gone
// (absent, or another incarnation), and the revision read.
func goneSince(ctx context.Context, cli *clientv3.Client, kvs []*mvccpb.KeyValue, from int64) (int64, int, error) {
	for _, serial := range []bool{true, false} {
		opts := []clientv3.OpOption{clientv3.WithKeysOnly()}
		if serial {
			opts = append(opts, clientv3.WithSerializable())
		}
		ops := make([]clientv3.Op, len(kvs))
		for i, kv := range kvs {
			ops[i] = clientv3.OpGet(string(kv.Key), opts...)
		}
		var resp *clientv3.TxnResponse
		err := retry.Reads(ctx, func(actx context.Context) (err error) {
			resp, err = cli.Txn(retry.Leader(actx)).Then(ops...).Commit()
			return err
		})
		switch {
		case err != nil:
			return 0, 0, err
		case serial && resp.Header.Revision < from:
			continue
		}
		n := 0
		for i, kv := range kvs {
			if g := resp.Responses[i].GetResponseRange().Kvs; len(g) == 0 || g[0].CreateRevision != kv.CreateRevision {
				n++
			}
		}
		return resp.Header.Revision, n, nil
	}
	return 0, 0, nil // unreachable: the leader's read is at or past from
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
