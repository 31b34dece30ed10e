package election

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// A hand-over under Oldest to a candidate that is not the next one keeps
// etcd's rule, the oldest key leads, at every revision: one transaction
// deletes the leader's key and the key of each candidate queued between
// it and the successor, leaving a mark on each skipped lease with the
// revision its wait knows, so the successor's key is the oldest. A
// skipped candidate's wait, finding its key gone with its mark, puts the
// key again (moved), now behind the successor, and waits on. etcd's own
// candidates would take their key's deletion for a loss or, waiting only
// for older keys, lead beside the successor: a hand-over skips only
// baton's candidates, which write a record.

// movedKey is the mark of a key of lease deleted by a hand-over that
// skipped it: its value is the key's CreateRevision then.
func (e *Election) movedKey(lease clientv3.LeaseID) string {
	return keys.LeaseKey(e.coord+"moved/", int64(lease))
}

// mover is the Oldest Owner's core.Mover: a key a hand-over skipped puts
// itself again behind the successor and waits on.
type mover struct{ e *Election }

// Moved: if key, created at rev, was skipped by a hand-over, it puts the
// key again with value and deletes the mark; it returns the key's new
// CreateRevision.
func (m mover) Moved(ctx context.Context, key, value string, rev int64) (int64, bool) {
	e := m.e
	lease := leaseOf(key)
	mk := e.movedKey(lease)
	var resp *clientv3.TxnResponse
	err := retry.Do(ctx, func(actx context.Context) (err error) {
		resp, err = e.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.Value(mk), "=", strconv.FormatInt(rev, 10)), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(lease)), clientv3.OpDelete(mk)).
			Else(clientv3.OpGet(key), clientv3.OpGet(mk, clientv3.WithCountOnly())).Commit()
		return err
	})
	switch {
	case err != nil:
		return 0, false
	case resp.Succeeded:
		if planted.On("i") {
			return rev, true
		}
		return resp.Header.Revision, true
	}
	// An earlier attempt may have applied unheard: only this wait puts
	// this key on its lease while the mark is there, and it deletes the mark.
	k, mr := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange()
	if len(k) == 1 && clientv3.LeaseID(k[0].Lease) == lease && k[0].CreateRevision > rev && mr.Count == 0 && string(k[0].Value) == value {
		return k[0].CreateRevision, true
	}
	return 0, false
}

// Unmark, for a wait that failed with key created at rev, it deletes key's mark, if a hand-over left one, and the key if a
// move whose reply was lost put it again (on this lease, later than rev;
// the failing wait still reserves the key, so no other Campaign of this
// session can have). A move that applies later finds no mark and puts
// nothing.
func (m mover) Unmark(key string, rev int64) []clientv3.Op {
	lease := leaseOf(key)
	return []clientv3.Op{clientv3.OpDelete(m.e.movedKey(lease)),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", lease), clientv3.Compare(clientv3.CreateRevision(key), ">", rev)},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil)}
}

// foreign returns the first key of the election, but the leader's, without
// a baton candidate's record on its lease.
func (st *state) foreign() *mvccpb.KeyValue {
	if planted.On("h") {
		return nil
	}
	for _, kv := range st.keys[min(1, len(st.keys)):] {
		if en := st.recs[Oldest][clientv3.LeaseID(kv.Lease)]; en == nil || !en.Moves {
			return kv
		}
	}
	return nil
}

// skipOps delete the keys of skipped, each that is still the one read
// (a nested transaction: one that left or came back later stays), with
// its mark. They go before the leader's deletion in the transaction: a
// waiter following the namespace's events sees its own key go first.
func (e *Election) skipOps(skipped []*mvccpb.KeyValue) []clientv3.Op {
	var ops []clientv3.Op
	for _, kv := range skipped {
		lease := clientv3.LeaseID(kv.Lease)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)},
			[]clientv3.Op{clientv3.OpDelete(string(kv.Key)), clientv3.OpPut(e.movedKey(lease), strconv.FormatInt(kv.CreateRevision, 10), clientv3.WithLease(lease))},
			nil))
	}
	return ops
}

// skipTarget checks a hand-over under Oldest from the leader of st to the
// key to: it returns to's key and the candidates queued ahead of it.
func skipTarget(st *state, to string) (target *mvccpb.KeyValue, skipped []*mvccpb.KeyValue, err error) {
	i := slices.IndexFunc(st.keys, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == to })
	if i <= 0 {
		return nil, nil, fmt.Errorf("transfer to %s: %w", to, ErrNoCandidate)
	}
	if i > 1 {
		if f := st.foreign(); f != nil {
			return nil, nil, fmt.Errorf("transfer to %s: %w: %s (an etcd concurrency.Election's or etcdctl's candidate, or an older baton's) would lead beside it; the term goes on",
				to, ErrForeignCandidate, f.Key)
		}
	}
	return st.keys[i], st.keys[1:i], nil
}
