package mutex

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/retry"
)

// Holder is the state of a lock as Observe sends it. The zero Holder
// (empty Key) means the lock is free.
type Holder struct {
	// Key is the holder's etcd key.
	Key string
	// Identity is what the holder wrote (WithIdentity, or "host:pid").
	Identity string
	// Token is the holder key's CreateRevision.
	Token fencing.Token
	// Lease is the lease the key is attached to.
	Lease clientv3.LeaseID
	// Revision is the etcd revision this state was read or observed at.
	Revision int64
	// Err is set only on the last value Observe sends before it closes its
	// channel because etcd refused the read for good.
	Err error
}

// IsFree reports whether h means "no holder".
func (h Holder) IsFree() bool { return h.Key == "" }

func (h Holder) same(o Holder) bool {
	return h.Key == o.Key && h.Identity == o.Identity && h.Token == o.Token
}

// Observe sends the lock's current holder first ("free" included), then
// every change: a new holder, a release, an expiry. States are sent in
// strictly increasing Revision, never one older than a state already
// sent, and never the same holder twice in a row. It follows every
// contender from its watch, so it names the next holder from the
// deletion event itself, without a read. After compaction, a dropped
// watch or a lost etcd leader it reads again and resumes, so it may skip
// holders that came and went meanwhile but always converges on the
// current one. Receive promptly: Observe waits for the receiver.
//
// The channel is closed when ctx ends, when the Mutex is closed, or when
// etcd refuses the read for good (permission denied, authentication
// failed); in that last case the last value sent has Err set and its
// other fields zero.
func (m *Mutex) Observe(ctx context.Context) <-chan Holder {
	ch := make(chan Holder)
	if !m.owner.Go(ctx, func(ctx context.Context) {
		defer close(ch)
		m.observe(ctx, ch)
	}) {
		close(ch)
	}
	return ch
}

// queueState is the queue as known from a read and the watch events since.
type queueState struct {
	kvs  map[string]*mvccpb.KeyValue
	last Holder
	sent bool
}

func (q *queueState) holder(rev int64) Holder {
	var best *mvccpb.KeyValue
	for _, kv := range q.kvs {
		if best == nil || kv.CreateRevision < best.CreateRevision {
			best = kv
		}
	}
	h := Holder{Revision: rev}
	if best != nil {
		h.Key, h.Identity = string(best.Key), string(best.Value)
		h.Token, h.Lease = fencing.Token(best.CreateRevision), clientv3.LeaseID(best.Lease)
	}
	return h
}

func (m *Mutex) observe(ctx context.Context, ch chan<- Holder) {
	q := &queueState{}
	send := func(h Holder) bool {
		if q.sent && (h.Revision <= q.last.Revision || h.same(q.last)) {
			return true
		}
		select {
		case ch <- h:
			q.last, q.sent = h, true
			return true
		case <-ctx.Done():
			return false
		}
	}
	wait := 10 * time.Millisecond
	for ctx.Err() == nil {
		resp, err := m.cli().Get(ctx, m.prefix, clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if retry.Permanent(err) {
				m.log.Error("observe: etcd refused to read the lock", m.fields(zap.Error(err))...)
				select {
				case ch <- Holder{Err: err}:
				case <-ctx.Done():
				}
				return
			}
			if retry.Sleep(ctx, wait) != nil {
				return
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		wait = 10 * time.Millisecond
		q.kvs = make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			q.kvs[string(kv.Key)] = kv
		}
		rev := resp.Header.Revision
		if !send(q.holder(rev)) || !m.follow(ctx, q, rev, send) {
			return
		}
	}
}

// follow applies watch events from revision read+1 and sends each new
// state, until the watch breaks (the caller reads again) or ctx ends
// (false).
func (m *Mutex) follow(ctx context.Context, q *queueState, read int64, send func(Holder) bool) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range m.cli().Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(read+1)) {
		if wr.Err() != nil {
			break
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				delete(q.kvs, string(ev.Kv.Key))
			} else {
				q.kvs[string(ev.Kv.Key)] = ev.Kv
			}
			if !send(q.holder(ev.Kv.ModRevision)) {
				return false
			}
		}
	}
	return ctx.Err() == nil
}
