// Package observe is the one loop that follows a queue's head for every
// primitive's Observe: one state per etcd revision, never back in time.
package observe

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/planted"
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

// Loop sends the queue's head under prefix: the current one first, then
// every change, once per revision (a transaction or a prefix delete is one
// state), in strictly increasing revision and never the same head twice in
// a row; it re-reads after compaction or a broken watch. It returns when
// ctx ends, when send returns false, or after sending a Head with Err set
// (refused is then called with the error first). track, if not nil, is
// called with the whole queue at every revision before its head is sent;
// it must neither keep nor change the map.
func Loop(ctx context.Context, cli *clientv3.Client, prefix string, send func(Head) bool, track func(q map[string]*mvccpb.KeyValue, rev int64), refused func(error)) {
	var last Head
	sent := false
	emit := func(h Head) bool {
		if h.Err == nil && sent && (h.Revision <= last.Revision || h.same(last)) {
			return true
		}
		if !send(h) {
			return false
		}
		last, sent = h, true
		return true
	}
	q := map[string]*mvccpb.KeyValue{}
	head := func(rev int64) Head {
		var best *mvccpb.KeyValue
		for _, kv := range q {
			if best == nil || kv.CreateRevision < best.CreateRevision {
				best = kv
			}
		}
		if track != nil {
			track(q, rev)
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
				refused(err)
				emit(Head{Err: err})
			}
			return 0, false
		}
		clear(q)
		for _, kv := range resp.Kvs {
			q[string(kv.Key)] = kv
		}
		return resp.Header.Revision, emit(head(resp.Header.Revision))
	}
	rev, ok := read()
	if !ok {
		return
	}
	reread := false
	_ = retry.Loop(ctx, retry.Backoff(0), retry.Backoff(0), func(ctx context.Context) (bool, error) {
		if reread {
			if rev, ok = read(); !ok {
				return true, nil
			}
		}
		reread = true
		// Watch from the current revision, which etcd serves at once (a past
		// one waits up to 100 ms in its unsynced set); read again if it
		// moved on since the read.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created && wr.Header.Revision > rev {
				if rev, ok = read(); !ok {
					return true, nil
				}
			}
			for i, ev := range wr.Events {
				if ev.Kv.ModRevision <= rev {
					continue // already in the state read
				}
				if ev.Type == mvccpb.DELETE && planted.On("d") {
					if r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSerializable()); err == nil {
						clear(q)
						for _, kv := range r.Kvs {
							q[string(kv.Key)] = kv
						}
					}
				} else if ev.Type == mvccpb.DELETE {
					delete(q, string(ev.Kv.Key))
				} else {
					q[string(ev.Kv.Key)] = ev.Kv
				}
				// One revision comes in one response: send its state once.
				if i+1 < len(wr.Events) && wr.Events[i+1].Kv.ModRevision == ev.Kv.ModRevision {
					continue
				}
				if !emit(head(ev.Kv.ModRevision)) {
					return true, nil
				}
			}
		}
		return false, errWatchBroke // read again after a pause
	}, nil)
}

var errWatchBroke = errors.New("watch broke")

// Chan sends conv of every head Loop sends on a channel that closes when
// the loop returns (or at once if run, which starts it in a goroutine its
// owner's Close ends and waits for, returns false). track, if not nil, is
// Loop's. conv and track are given the loop's ctx.
func Chan[S any](ctx context.Context, run func(context.Context, func(context.Context)) bool, cli *clientv3.Client, prefix string,
	conv func(context.Context, Head) S, track func(context.Context, map[string]*mvccpb.KeyValue, int64), refused func(error)) <-chan S {
	ch := make(chan S)
	if !run(ctx, func(ctx context.Context) {
		defer close(ch)
		var tr func(map[string]*mvccpb.KeyValue, int64)
		if track != nil {
			tr = func(q map[string]*mvccpb.KeyValue, rev int64) { track(ctx, q, rev) }
		}
		Loop(ctx, cli, prefix, func(h Head) bool {
			select {
			case ch <- conv(ctx, h):
				return true
			case <-ctx.Done():
				return false
			}
		}, tr, refused)
	}) {
		close(ch)
	}
	return ch
}
