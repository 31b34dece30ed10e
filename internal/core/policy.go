package core

import (
	"context"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
)

// Policy decides when a queued key may hold, for owners whose keys are not
// exclusive (semaphores, read/write locks). A nil Policy is the mutex's:
// the oldest key alone holds.
type Policy interface {
	// Blockers returns those of older (every key of the queue created
	// before own, oldest first) that keep own from holding while more than
	// allowed of them remain. The older keys only ever go, never come, so
	// a key that may hold keeps that right until it goes.
	Blockers(own string, older []*mvccpb.KeyValue) (blockers []*mvccpb.KeyValue, allowed int)
}

// seq makes each tagged key unique in this process (leases are unique in
// the cluster).
var seq atomic.Uint64

// keyFor is the key of one acquisition: the lease key, or with a Tag a key
// of its own per acquisition, so one session can hold several.
func (o *Owner[T]) keyFor(lease int64) string {
	key := keys.LeaseKey(o.cfg.Prefix, lease)
	if o.cfg.Tag != "" {
		key = keys.TaggedKey(key, o.cfg.Tag, seq.Add(1))
	}
	return key
}

// queueRead is the read of the enqueue transaction. With a Policy it is
// the whole queue. Without, a put reads the two newest keys: its own and
// the one just ahead, which a waiter then watches without another read;
// the read beside an existing key is the oldest key.
func (o *Owner[T]) queueRead(put bool) clientv3.Op {
	switch {
	case o.cfg.Policy != nil:
		return clientv3.OpGet(o.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	case put:
		return clientv3.OpGet(o.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))
	default:
		return clientv3.OpGet(o.cfg.Prefix, clientv3.WithFirstCreate()...)
	}
}

// mayHold tells from the enqueue's read whether key, created at rev,
// holds; if not, and the read named it, it returns the key just ahead.
func (o *Owner[T]) mayHold(read []*mvccpb.KeyValue, put bool, key string, rev int64) (bool, *mvccpb.KeyValue) {
	if o.cfg.Policy == nil {
		if !put {
			return len(read) > 0 && read[0].CreateRevision == rev, nil
		}
		if len(read) == 0 || read[0].CreateRevision != rev {
			return false, nil // not the read expected: wait reads again
		}
		if len(read) == 1 {
			return true, nil
		}
		return false, read[1]
	}
	older := make([]*mvccpb.KeyValue, 0, len(read))
	for _, kv := range read {
		if kv.CreateRevision < rev {
			older = append(older, kv)
		}
	}
	b, allowed := o.cfg.Policy.Blockers(key, older)
	return len(b) <= allowed, nil
}

// waitPolicy blocks until the Policy lets key (created at rev) hold and
// returns a revision at which it did and key existed. It watches the
// queue's deletions from before its read, so none is missed, and reads
// again only when the watch breaks. While waiting, the lease's loss ends
// the wait.
func (o *Owner[T]) waitPolicy(ctx context.Context, l *Lease, key string, rev int64) (int64, error) {
	cli := o.sess.cli
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer stop()
	prefix := o.cfg.Prefix
	for {
		at, done, err := o.waitRound(ctx, cli, prefix, key, rev)
		if done || err != nil {
			return at, err
		}
		if ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		if err := retry.Sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// waitRound watches the queue's deletions, reads it once the watch is in
// place, and follows the deletions until the Policy lets key hold (done)
// or the watch breaks (not done: read again).
func (o *Owner[T]) waitRound(ctx context.Context, cli *clientv3.Client, prefix, key string, rev int64) (int64, bool, error) {
	wctx, cancelW := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancelW()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	wr, ok := <-wch
	if ok && wr.Err() != nil && retry.Permanent(wr.Err()) {
		return 0, false, wr.Err()
	}
	if !ok || wr.Err() != nil || !wr.Created {
		return 0, false, nil
	}
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(rev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		if ctx.Err() != nil || retry.Permanent(err) {
			return 0, false, failure(ctx, err)
		}
		return 0, false, nil
	}
	if own := resp.Responses[1].GetResponseRange().Kvs; len(own) == 0 || own[0].CreateRevision != rev {
		return 0, false, errOwnKeyGone
	}
	blockers, allowed := o.cfg.Policy.Blockers(key, resp.Responses[0].GetResponseRange().Kvs)
	if len(blockers) <= allowed {
		return resp.Header.Revision, true, nil
	}
	left := make(map[string]bool, len(blockers))
	for _, kv := range blockers {
		left[string(kv.Key)] = true
	}
	read := resp.Header.Revision
	for wr := range wch {
		if wr.Err() != nil {
			break
		}
		ownGone := false
		at := int64(0)
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.DELETE {
				continue
			}
			k := string(ev.Kv.Key)
			delete(left, k)
			if k == key && ev.Kv.ModRevision > read {
				ownGone = true
			}
			at = max(at, ev.Kv.ModRevision)
		}
		if ownGone {
			return 0, false, errOwnKeyGone
		}
		// The events of one response end at one revision: key was present
		// there (no deletion of it came), and so many blockers were gone.
		if len(left) <= allowed {
			return max(at, read), true, nil
		}
	}
	if ctx.Err() != nil {
		return 0, false, context.Cause(ctx)
	}
	return 0, false, nil
}
