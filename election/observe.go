package election

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/queue"
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
	entries, _, err := queue.Read(ctx, e.cli, e.prefix)
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
// change: a new leader, a Proclaim, a resignation, a lease expiry. It
// re-reads and resumes after compaction, a dropped watch or a lost etcd
// leader, so it may skip states that came and went meanwhile but always
// converges on the current one. The channel is closed only when ctx ends
// or the Election is closed. Receive promptly: Observe waits for the
// receiver and then sends the state current at that moment.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.sessions.ClosingContext(), cancel)
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		defer close(ch)
		defer cancel()
		defer stop()
		e.observe(ctx, ch)
	}()
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	var last Leader
	sentAny := false
	send := func(l Leader) bool {
		if sentAny && l.same(last) {
			return true
		}
		select {
		case ch <- l:
			last, sentAny = l, true
			return true
		case <-ctx.Done():
			return false
		}
	}
	wait := 10 * time.Millisecond
	for ctx.Err() == nil {
		cur, err := e.readLeader(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if retry.Permanent(err) {
				// Nobody to return it to: say it, and keep trying slowly in
				// case the permission is granted.
				e.log.Error("observe: cannot read the election", zap.Error(err))
				wait = 5 * time.Second
			}
			if !sleep(ctx, wait) {
				return
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		wait = 10 * time.Millisecond
		if !send(cur) {
			return
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		ok := e.follow(ctx, wctx, cur.Revision, &last, send)
		wcancel()
		if !ok {
			return
		}
	}
}

// follow applies watch events to the known state, read at revision read,
// until the watch breaks (then the caller re-reads) or ctx ends (false).
// The watch starts at the current revision, which etcd serves at once (a
// start revision already past waits up to 100 ms in etcd's unsynced set);
// if anything changed since the read, one more read covers the gap.
func (e *Election) follow(ctx, wctx context.Context, read int64, last *Leader, send func(Leader) bool) bool {
	for wr := range e.cli.Watch(wctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
		if wr.Err() != nil {
			break
		}
		if wr.Created && wr.Header.Revision > read {
			cur, err := e.readLeader(ctx)
			if err != nil {
				return ctx.Err() == nil
			}
			if !send(cur) {
				return false
			}
		}
		for _, ev := range wr.Events {
			kv := ev.Kv
			cur := *last
			switch {
			case ev.Type == mvccpb.PUT && string(kv.Key) == cur.Key && fencing.Token(kv.CreateRevision) == cur.Token:
				cur.Value, cur.Revision = string(kv.Value), kv.ModRevision
			case ev.Type == mvccpb.PUT && cur.IsZero():
				// With no leader there were no keys, so the first new one leads.
				cur = Leader{Key: string(kv.Key), Value: string(kv.Value), Token: fencing.Token(kv.CreateRevision),
					LeaseID: clientv3.LeaseID(kv.Lease), Revision: kv.ModRevision}
			case ev.Type == mvccpb.DELETE && string(kv.Key) == cur.Key:
				next, err := e.readLeader(ctx)
				if err != nil {
					return ctx.Err() == nil // re-read from the top
				}
				cur = next
			default:
				continue // a waiter came or went
			}
			if !send(cur) {
				return false
			}
		}
	}
	return ctx.Err() == nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
