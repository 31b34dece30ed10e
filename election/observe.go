package election

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/retry"
	"go.uber.org/zap"
)

// Leader is the state of an election as read from etcd. The zero Leader
// (empty Key) means "no leader".
type Leader struct {
	Key   string
	Value string
	// Token is the leader key's CreateRevision.
	Token   fencing.Token
	LeaseID clientv3.LeaseID
	// Revision is the etcd revision this state was read or observed at.
	Revision int64
	// Err is set only on the last value Observe sends before it closes
	// its channel because etcd refused the read for good.
	Err error
}

// IsZero reports whether l means "no leader".
func (l Leader) IsZero() bool { return l.Key == "" }

func (l Leader) same(o Leader) bool {
	return l.Key == o.Key && l.Value == o.Value && l.Token == o.Token
}

// Candidate is one entry of the queue.
type Candidate struct {
	Key   string
	Value string
	// Token is the key's CreateRevision: the fencing token it holds or
	// will hold when it leads.
	Token   fencing.Token
	LeaseID clientv3.LeaseID
	// TTL is the lease's time left when read; -1 if the lease is gone.
	TTL time.Duration
}

// Leader returns the current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, err := e.readLeader(ctx)
	if err != nil {
		return Leader{}, err
	}
	if l.IsZero() {
		return l, ErrNoLeader
	}
	return l, nil
}

func (e *Election) readLeader(ctx context.Context) (Leader, error) {
	resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, err
	}
	l := Leader{Revision: resp.Header.Revision}
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		l.Key, l.Value = string(kv.Key), string(kv.Value)
		l.Token, l.LeaseID = fencing.Token(kv.CreateRevision), clientv3.LeaseID(kv.Lease)
	}
	return l, nil
}

// Candidates returns the queue in order, the leader first, each with its
// lease's time left.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	entries, _, err := core.Read(ctx, e.cli, e.prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Candidate, len(entries))
	for i, en := range entries {
		out[i] = Candidate{Key: en.Key, Value: en.Value, Token: fencing.Token(en.CreateRevision), LeaseID: en.Lease, TTL: en.TTL}
	}
	return out, nil
}

// Observe sends the current state first ("no leader" included), then every
// change: a new leader, a Proclaim, a resignation, a lease expiry. States
// are sent in strictly increasing Revision: never one older than a state
// already sent. It follows every candidate from its watch, so it names the
// next leader from the deletion event itself, without a read. It re-reads
// and resumes after compaction, a dropped watch or a lost etcd leader, so
// it may skip states that came and went meanwhile but always converges on
// the current one. Receive promptly: Observe waits for the receiver and
// then sends the state current at that moment.
//
// The channel is closed when ctx ends, when the Election is closed, or
// when etcd refuses the read for good (permission denied, authentication
// failed); in that last case the last value sent has Err set and its
// other fields zero, so a receiver tells a refusal from a normal end.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if !e.owner.Go(ctx, func(ctx context.Context) {
		defer close(ch)
		e.observe(ctx, ch)
	}) {
		close(ch)
	}
	return ch
}

// observer is the queue as known from a read and the watch events since.
type observer struct {
	cands map[string]*mvccpb.KeyValue
	last  Leader
	sent  bool
}

func (o *observer) reset(kvs []*mvccpb.KeyValue) {
	o.cands = make(map[string]*mvccpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		o.cands[string(kv.Key)] = kv
	}
}

func (o *observer) leader(rev int64) Leader {
	var best *mvccpb.KeyValue
	for _, kv := range o.cands {
		if best == nil || kv.CreateRevision < best.CreateRevision {
			best = kv
		}
	}
	l := Leader{Revision: rev}
	if best != nil {
		l.Key, l.Value = string(best.Key), string(best.Value)
		l.Token, l.LeaseID = fencing.Token(best.CreateRevision), clientv3.LeaseID(best.Lease)
	}
	return l
}

func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	o := &observer{}
	send := func(l Leader) bool {
		if o.sent && (l.Revision <= o.last.Revision || l.same(o.last)) {
			return true // never back in time, never the same state twice
		}
		select {
		case ch <- l:
			o.last, o.sent = l, true
			return true
		case <-ctx.Done():
			return false
		}
	}
	wait := 10 * time.Millisecond
	for ctx.Err() == nil {
		resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if retry.Permanent(err) {
				e.log.Error("observe: etcd refused to read the election", zap.Error(err))
				select {
				case ch <- Leader{Err: err}:
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
		o.reset(resp.Kvs)
		rev := resp.Header.Revision
		if !send(o.leader(rev)) {
			return
		}
		if !e.follow(ctx, o, rev, send) {
			return
		}
	}
}

// follow applies watch events after revision read to the known queue and
// sends each new state, until the watch breaks (the caller re-reads) or ctx
// ends (false). The watch starts at the current revision, which etcd
// serves at once (a start revision already past waits up to 100 ms in its
// unsynced set); if the revision moved since the read, the queue is read
// again, and events at or below the revision read are skipped.
func (e *Election) follow(ctx context.Context, o *observer, read int64, send func(Leader) bool) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	created := false
	for wr := range e.cli.Watch(wctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
		if wr.Err() != nil {
			break
		}
		if wr.Created && !created {
			created = true
			if wr.Header.Revision > read {
				resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix())
				if err != nil {
					return ctx.Err() == nil // re-read from the top
				}
				o.reset(resp.Kvs)
				read = resp.Header.Revision
				if !send(o.leader(read)) {
					return false
				}
			}
		}
		for i, ev := range wr.Events {
			kv := ev.Kv
			if kv.ModRevision <= read {
				continue // already in the state read
			}
			if ev.Type == mvccpb.DELETE {
				delete(o.cands, string(kv.Key))
			} else {
				o.cands[string(kv.Key)] = kv
			}
			// One revision (a transaction, a prefix delete) comes in one
			// response: send its state once all its events are applied.
			if i+1 < len(wr.Events) && wr.Events[i+1].Kv.ModRevision == kv.ModRevision {
				continue
			}
			if !send(o.leader(kv.ModRevision)) {
				return false
			}
		}
	}
	return ctx.Err() == nil
}
