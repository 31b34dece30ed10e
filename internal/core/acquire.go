package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/retry"
)

// ErrBusy is returned by a try acquisition when another contender owns.
var ErrBusy = errors.New("held by another contender")

// cleanupWait is how long a failed acquisition waits for its key's
// deletion; the deletion goes on in the background after that, so a caller
// whose ctx ended is never held up by an unreachable etcd.
const cleanupWait = 80 * time.Millisecond

// queue puts the caller's key under the prefix and returns a hold once it
// is the oldest. Every contender waits for the key just ahead of its own,
// so a release wakes one waiter. On any error no key is left behind.
func (o *Owner[T]) queue(ctx context.Context, l *Lease, value string, try bool) (*Hold, error) {
	s := o.sess
	cli := s.cli
	key := o.keyFor(int64(l.id))

	release, err := s.reserve(ctx, key, try)
	if errors.Is(err, errReserved) {
		return nil, ErrBusy
	}
	if err != nil {
		return nil, err
	}
	w := s.watcher(key)
	w.expect(key)

	// Put our key unless it exists. A key on our own lease that exists is
	// ours: an earlier attempt whose reply was lost (the key is reserved
	// here), or one left on this lease by an earlier run, which etcd's
	// concurrency package also adopts; so retrying is safe. On a borrowed
	// lease, a key that existed before this call with this caller's value
	// belongs to another Mutex or Election of this process on the same
	// etcd session: wait for it like for an older contender.
	var resp *clientv3.TxnResponse
	var rev int64
	for {
		attempts := 0
		err = retry.Do(ctx, func(actx context.Context) (err error) {
			attempts++
			resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, value, clientv3.WithLease(l.id)), o.queueRead(true)).
				Else(clientv3.OpGet(key), o.queueRead(false)).
				Commit()
			return err
		})
		if err != nil {
			w.unexpect(key)
			if retry.Permanent(err) {
				release.free() // refused as a whole: nothing was written
				return nil, err
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				release.free()
				l.lose(errs.ErrLeaseExpired)
				return nil, errs.Lost(errs.ErrLeaseExpired)
			}
			o.deleteKey(l, key, 0, release) // the put may have been applied unheard
			return nil, failure(ctx, err)
		}
		rev = resp.Header.Revision
		if resp.Succeeded {
			break
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		rev = kv.CreateRevision
		if s.borrowed != nil && attempts == 1 && string(kv.Value) == value {
			if try {
				w.unexpect(key)
				release.free()
				return nil, ErrBusy
			}
			if _, err := waitGone(ctx, cli, kv.Key, rev, resp.Header.Revision); err != nil {
				w.unexpect(key)
				release.free()
				return nil, err
			}
			continue
		}
		if string(kv.Value) != value {
			// An adopted key carries this caller's value, as etcd's
			// Campaign proclaims it.
			if err := o.adopt(ctx, key, rev, value, l); err != nil {
				w.unexpect(key)
				o.deleteKey(l, key, rev, release)
				return nil, failure(ctx, err)
			}
		}
		break
	}
	at := resp.Header.Revision
	if ok, ahead := o.mayHold(resp.Responses[1].GetResponseRange().Kvs, resp.Succeeded, key, rev); !ok {
		if try {
			w.unexpect(key)
			o.deleteKey(l, key, rev, release)
			return nil, ErrBusy
		}
		if o.cfg.Policy != nil {
			at, err = o.waitPolicy(ctx, l, key, rev)
		} else {
			at, err = o.wait(ctx, l, key, rev, ahead, at)
		}
		if err != nil {
			w.unexpect(key)
			if errors.Is(err, errOwnKeyGone) {
				release.free()
				return nil, o.lostReason(ctx, l)
			}
			o.deleteKey(l, key, rev, release)
			return nil, err
		}
	}
	if f := s.cfg.Hooks.AfterConfirm; f != nil {
		f(key)
	}
	h := newHold(o, l, key, rev, release)
	h.watcher, h.at = w, at
	w.register(key, h)
	return h, nil
}

var errOwnKeyGone = errors.New("own key gone while waiting")

// adopt writes value to our existing key, guarded by its CreateRevision.
func (o *Owner[T]) adopt(ctx context.Context, key string, rev int64, value string, l *Lease) error {
	return retry.Do(ctx, func(actx context.Context) error {
		r, err := o.sess.cli.Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(l.id))).Commit()
		if err == nil && !r.Succeeded {
			return errOwnKeyGone
		}
		return err
	})
}

// wait blocks until no key older than ours remains and returns the revision
// that showed it; ahead, when known, is the key just ahead of ours at
// revision read. While waiting, the lease's loss ends the wait.
//
// The read after a predecessor's deletion is serializable: it is not held
// up by the writes in flight (a linearizable read waits for them), and it
// is enough once the member has applied that deletion, as no key older
// than ours can appear. A member behind it is read again linearizably.
func (o *Owner[T]) wait(ctx context.Context, l *Lease, key string, rev int64, ahead *mvccpb.KeyValue, read int64) (int64, error) {
	cli := o.sess.cli
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer stop()
	before := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))
	var seen int64 // the last deletion heard; 0: read linearizably
	if ahead != nil {
		var err error
		if seen, err = waitGone(ctx, cli, ahead.Key, ahead.CreateRevision, read); err != nil {
			return 0, err
		}
	}
	for {
		predOp, ownOp := clientv3.OpGet(o.cfg.Prefix, before...), clientv3.OpGet(key)
		if seen > 0 {
			predOp = clientv3.OpGet(o.cfg.Prefix, append(before, clientv3.WithSerializable())...)
			ownOp = clientv3.OpGet(key, clientv3.WithSerializable())
		}
		// A member without a leader refuses (and the read is retried)
		// instead of answering from a state that may be stale.
		resp, err := cli.Txn(clientv3.WithRequireLeader(ctx)).Then(predOp, ownOp).Commit()
		if err != nil {
			// Only reads: retried while the caller waits (a member
			// restarting, a leader election), unless refused for good.
			if ctx.Err() == nil && !retry.Permanent(err) && retry.Sleep(ctx, 100*time.Millisecond) == nil {
				seen = 0
				continue
			}
			return 0, failure(ctx, err)
		}
		own := resp.Responses[1].GetResponseRange().Kvs
		if seen > 0 && (resp.Header.Revision < seen || len(own) == 0) {
			seen = 0 // a member behind the deletion, or our key's: ask the leader
			continue
		}
		if len(own) == 0 || own[0].CreateRevision != rev {
			return 0, errOwnKeyGone
		}
		pred := resp.Responses[0].GetResponseRange().Kvs
		if len(pred) == 0 {
			return resp.Header.Revision, nil
		}
		seen, err = waitGone(ctx, cli, pred[0].Key, pred[0].CreateRevision, resp.Header.Revision)
		if err != nil {
			return 0, err
		}
	}
}

// lostReason says why our key vanished while waiting: the lease is gone, or
// only the key was deleted.
func (o *Owner[T]) lostReason(ctx context.Context, l *Lease) error {
	if l.ctx.Err() != nil {
		return context.Cause(l.ctx)
	}
	if l.gone(context.WithoutCancel(ctx)) {
		l.lose(errs.ErrLeaseExpired)
		return errs.Lost(errs.ErrLeaseExpired)
	}
	return errs.Lost(errs.ErrKeyDeleted)
}

// failure prefers why ctx ended (the caller's cancel, Close, the lease's
// loss) over the request error it caused.
func failure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// deleteKey deletes key (guarded by rev when known; rev 0 deletes whatever
// is there, safe as the key is named after our lease and reserved here),
// then frees its reservation. It waits up to cleanupWait and leaves the
// rest to the background, which retries until the key is gone, the lease
// is gone, or etcd refuses for good; after Close of an owner with its own
// session began it tries once more.
// The reservation stays while the key may exist, so no later acquisition
// adopts a key that is still being deleted.
func (o *Owner[T]) deleteKey(l *Lease, key string, rev int64, release *reservation) {
	// On a session shared with other owners the reservation outlives this
	// owner: the session finishes the deletion, or the name stays wedged.
	shared := !o.cfg.OwnSession
	var closing <-chan struct{}
	if !shared {
		closing = o.closingCh()
	}
	done := make(chan struct{})
	run := func() {
		defer close(done)
		// A granted lease's keys go with it once it is lost, a borrowed
		// one's when its owner closes it: stop then.
		stop := l.ctx
		if cs := o.sess.borrowed; cs != nil {
			stop = cs.Ctx()
		}
		for attempt := 0; ; attempt++ {
			err := deleteOnce(stop, o.sess.cli, key, rev)
			switch {
			case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
				release.free()
				return
			case retry.Permanent(err):
				o.sess.cfg.Logger.Error("cannot delete a key of this process; it stays until its lease ends",
					zap.String("key", key), zap.Error(err))
				release.free()
				return
			case stop.Err() != nil:
				release.free() // the lease goes with its keys
				return
			}
			select {
			case <-closing:
				if attempt > 0 {
					return // left reserved: the key may still exist
				}
			case <-stop.Done():
			case <-time.After(retry.Backoff(attempt)):
			}
		}
	}
	start := o.goBG
	if shared {
		start = o.sess.goBG
	}
	if !start(run) {
		go run()
		<-done
		return
	}
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

const deleteTimeout = 2 * time.Second

func deleteOnce(stop context.Context, cli *clientv3.Client, key string, rev int64) error {
	ctx, cancel := context.WithTimeout(stop, deleteTimeout)
	defer cancel()
	if rev == 0 {
		_, err := cli.Delete(ctx, key)
		return err
	}
	_, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// waitGone returns nil once key, seen with CreateRevision rev at revision
// read, is deleted or replaced, or when the watch ends for a reason worth
// re-reading the queue for; it returns an error only when ctx ends.
//
// The watch starts at the current revision, which etcd serves from its
// synced set at once (a start revision already past waits up to 100 ms in
// its unsynced set); if the revision moved on since read, one read of the
// key covers the gap.
func waitGone(ctx context.Context, cli *clientv3.Client, key []byte, rev, read int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	created := false
	for wr := range cli.Watch(wctx, string(key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
		if wr.Err() != nil {
			break
		}
		if wr.Created && !created {
			created = true
			if wr.Header.Revision > read {
				// Deletions after the watch's start come as events; the
				// state at that start or later is what is missing. A
				// serializable read gives it unless the member is behind.
				g, err := cli.Get(clientv3.WithRequireLeader(ctx), string(key), clientv3.WithKeysOnly(), clientv3.WithSerializable())
				if err == nil && g.Header.Revision < wr.Header.Revision {
					g, err = cli.Get(ctx, string(key), clientv3.WithKeysOnly())
				}
				if err != nil {
					break
				}
				if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != rev {
					return g.Header.Revision, nil
				}
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return ev.Kv.ModRevision, nil
			}
		}
	}
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	return 0, retry.Sleep(ctx, 50*time.Millisecond)
}
