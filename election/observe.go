package election

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
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
	resp, err := e.o.Client().Get(ctx, e.Prefix(), clientv3.WithFirstCreate()...)
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

// Observe sends the current state first ("no leader" included), then every
// change: a new leader, a Proclaim, a resignation, a lease expiry. Each etcd revision is one
// state (a transaction or a prefix delete is sent once, as its outcome). States
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
	return core.Observe(e.o, ctx, func(h core.Head) Leader {
		return Leader{Key: h.Key, Value: h.Value, Token: fencing.Token(h.Token), LeaseID: h.Lease, Revision: h.Revision, Err: h.Err}
	})
}
