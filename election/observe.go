package election

import (
	"context"
	"encoding/json"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
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
	// Priority, Version and Strategy are the leader's attributes, as
	// Candidates reports them, from its record (not from Value: an etcd
	// concurrency.Election observer sees the plain value). Observe fills
	// them; zero, "" and Oldest for a leader without a record (no
	// attributes, or not baton's) and when the record could not be read
	// (such as a role that may read the election but not its records).
	Priority int
	Version  string
	Strategy Strategy
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
// Each leader's attributes are read once, in the revision that made it
// leader, with a read of its record bounded to about a second; a Proclaim
// reads nothing more.
//
// The channel is closed when ctx ends, when the Election is closed, or
// when etcd refuses the read for good (permission denied, authentication
// failed); in that last case the last value sent has Err set and its
// other fields zero, so a receiver tells a refusal from a normal end.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	var last Leader // the last leader whose record was read; only Observe's goroutine touches it
	return core.Observe(e.o, ctx, func(h core.Head) Leader {
		l := Leader{Key: h.Key, Value: h.Value, Token: fencing.Token(h.Token), LeaseID: h.Lease, Revision: h.Revision, Err: h.Err}
		switch {
		case l.IsZero():
		case l.Key == last.Key && l.Token == last.Token:
			l.Priority, l.Version, l.Strategy = last.Priority, last.Version, last.Strategy
		case e.readAttributes(ctx, &l) == nil:
			last = l
		}
		return l
	})
}

// readAttributes fills l's attributes from the leader's record, read at
// l.Revision (or now, if compacted): a record is written before its key
// and deleted after it, so that revision shows it.
func (e *Election) readAttributes(ctx context.Context, l *Leader) error {
	ctx, cancel := context.WithTimeout(ctx, retry.AttemptTimeout)
	defer cancel()
	read := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		return e.o.Client().Txn(ctx).Then(
			clientv3.OpGet(keys.LeaseKey(e.recordPrefix(Preferred), int64(l.LeaseID)), opts...),
			clientv3.OpGet(keys.LeaseKey(e.recordPrefix(Oldest), int64(l.LeaseID)), opts...)).Commit()
	}
	resp, err := read(clientv3.WithRev(l.Revision))
	if errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = read()
	}
	if err != nil {
		return err
	}
	for i, s := range []Strategy{Preferred, Oldest} {
		for _, kv := range resp.Responses[i].GetResponseRange().Kvs {
			var r record
			if json.Unmarshal(kv.Value, &r) == nil && clientv3.LeaseID(kv.Lease) == l.LeaseID {
				l.Priority, l.Version, l.Strategy = r.Priority, r.Version, s
				return nil
			}
		}
	}
	return nil
}
