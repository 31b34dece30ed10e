package core

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/retry"
)

// Head is the oldest key of a queue at a revision, as Observe sends it; the
// zero Key means an empty queue.
type Head struct {
	Key, Value string
	Token      int64
	Lease      clientv3.LeaseID
	Revision   int64
	Err        error // set on the last value when etcd refused the read for good
}

func (h Head) same(o Head) bool { return h.Key == o.Key && h.Value == o.Value && h.Token == o.Token }

// Observe sends conv of the queue's head: the current one first, then every
// change, once per revision (a transaction or prefix delete is one state),
// in strictly increasing revision and never the same head twice in a row.
// It re-reads after compaction or a broken watch. The channel closes when
// ctx ends, on Close, or after a value with Err set.
func Observe[T, S any](o *Owner[T], ctx context.Context, conv func(Head) S) <-chan S {
	ch := make(chan S)
	var last Head
	sent := false
	send := func(ctx context.Context, h Head) bool {
		if h.Err == nil && sent && (h.Revision <= last.Revision || h.same(last)) {
			return true
		}
		select {
		case ch <- conv(h):
			last, sent = h, true
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !o.Go(ctx, func(ctx context.Context) { defer close(ch); o.observe(ctx, send) }) {
		close(ch)
	}
	return ch
}

func (o *Owner[T]) observe(ctx context.Context, send func(context.Context, Head) bool) {
	cli, prefix := o.sess.cli, o.cfg.Prefix
	q := map[string]*mvccpb.KeyValue{}
	head := func(rev int64) Head {
		var best *mvccpb.KeyValue
		for _, kv := range q {
			if best == nil || kv.CreateRevision < best.CreateRevision {
				best = kv
			}
		}
		h := Head{Revision: rev}
		if best != nil {
			h.Key, h.Value, h.Token, h.Lease = string(best.Key), string(best.Value), best.CreateRevision, clientv3.LeaseID(best.Lease)
		}
		return h
	}
	read := func() (int64, bool) {
		var resp *clientv3.GetResponse
		err := retry.Reads(ctx, func(ctx context.Context) (err error) {
			resp, err = cli.Get(ctx, prefix, clientv3.WithPrefix())
			return err
		})
		if err != nil {
			if ctx.Err() == nil && retry.Permanent(err) {
				o.cfg.Logger.Error("observe: etcd refused the read", o.fields(zap.Error(err))...)
				send(ctx, Head{Err: err})
			}
			return 0, false
		}
		clear(q)
		for _, kv := range resp.Kvs {
			q[string(kv.Key)] = kv
		}
		return resp.Header.Revision, send(ctx, head(resp.Header.Revision))
	}
	rev, ok := read()
	for ok && ctx.Err() == nil {
		// Watch from the current revision, which etcd serves at once (a past
		// one waits up to 100 ms in its unsynced set); read again if it
		// moved on since the read.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created && wr.Header.Revision > rev {
				if rev, ok = read(); !ok {
					break
				}
			}
			for i, ev := range wr.Events {
				if ev.Kv.ModRevision <= rev {
					continue // already in the state read
				}
				if ev.Type == mvccpb.DELETE {
					delete(q, string(ev.Kv.Key))
				} else {
					q[string(ev.Kv.Key)] = ev.Kv
				}
				// One revision comes in one response: send its state once.
				if i+1 < len(wr.Events) && wr.Events[i+1].Kv.ModRevision == ev.Kv.ModRevision {
					continue
				}
				if ok = send(ctx, head(ev.Kv.ModRevision)); !ok {
					break
				}
			}
			if !ok {
				break
			}
		}
		cancel()
		if ok && ctx.Err() == nil {
			if retry.Sleep(ctx, retry.Backoff(0)) == nil {
				rev, ok = read()
			}
		}
	}
}
