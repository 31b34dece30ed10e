package election

import (
	"context"
	"encoding/json"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/observe"
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
	// them as its record was when Observe first saw the key among the two
	// oldest; zero, "" and Oldest for a leader without a record (no
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
// A leader's attributes are read from its record, with a read bounded to
// about a second, in the state where Observe first saw its key among the
// two oldest. A candidate waiting next in line is read while it waits, so
// a hand-over to it is sent without a read on its way; a Preferred
// candidate's key is made as it leads, and that state waits for its read.
// A record written again later (a Proclaim, or another Campaign through the
// same lease) is not read again. A read that fails leaves the attributes
// zero and is made again with the next state.
//
// The channel is closed when ctx ends, when the Election is closed, or
// when etcd refuses the read for good (permission denied, authentication
// failed); in that last case the last value sent has Err set and its
// other fields zero, so a receiver tells a refusal from a normal end.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	a := &ahead{e: e, m: map[string]*attrRead{}}
	return observe.Chan(ctx, e.o.Go, e.o.Client(), e.o.Prefix(), func(ctx context.Context, h observe.Head) Leader {
		l := Leader{Key: h.Key, Value: h.Value, Token: fencing.Token(h.Token), LeaseID: h.Lease, Revision: h.Revision, Err: h.Err}
		if !l.IsZero() {
			a.fill(ctx, &l)
		}
		return l
	}, a.track, e.o.Refused)
}

// attributes are a candidate's, as its record says.
type attributes struct {
	Priority int
	Version  string
	Strategy Strategy
}

// ahead reads the records of the two oldest keys, the leader and the next
// in line, as they get there; only Observe's goroutine calls its methods,
// and its reads end with that goroutine's ctx.
type ahead struct {
	e *Election
	m map[string]*attrRead // by key
}

// attrRead is one key's record read; a and err are set before done closes.
type attrRead struct {
	token  int64 // the key's CreateRevision
	cancel context.CancelFunc
	done   chan struct{}
	a      attributes
	err    error
}

// track starts a read of the two oldest keys' records at rev, the state's
// revision, as each gets there, and drops the others'.
func (r *ahead) track(ctx context.Context, q map[string]*mvccpb.KeyValue, rev int64) {
	var first, second *mvccpb.KeyValue
	for _, kv := range q {
		switch {
		case first == nil || kv.CreateRevision < first.CreateRevision:
			first, second = kv, first
		case second == nil || kv.CreateRevision < second.CreateRevision:
			second = kv
		}
	}
	for k, ar := range r.m {
		if (first == nil || k != string(first.Key) || ar.token != first.CreateRevision) &&
			(second == nil || k != string(second.Key) || ar.token != second.CreateRevision) {
			ar.cancel()
			delete(r.m, k)
		}
	}
	for _, kv := range []*mvccpb.KeyValue{first, second} {
		if kv == nil || r.m[string(kv.Key)] != nil {
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		ar := &attrRead{token: kv.CreateRevision, cancel: cancel, done: make(chan struct{})}
		lease := clientv3.LeaseID(kv.Lease)
		if !r.e.o.Go(rctx, func(ctx context.Context) {
			defer close(ar.done)
			ar.a, ar.err = r.e.readAttributes(ctx, lease, rev)
		}) {
			cancel() // closing
			continue
		}
		r.m[string(kv.Key)] = ar
	}
}

// fill sets l's attributes once its record's read ends; a failed read
// leaves them zero and is made again with the next state.
func (r *ahead) fill(ctx context.Context, l *Leader) {
	ar := r.m[l.Key]
	if ar == nil || ar.token != int64(l.Token) {
		return
	}
	select {
	case <-ar.done:
	case <-ctx.Done():
		return
	}
	if ar.err != nil {
		ar.cancel()
		delete(r.m, l.Key)
		return
	}
	l.Priority, l.Version, l.Strategy = ar.a.Priority, ar.a.Version, ar.a.Strategy
}

// readAttributes reads the attributes of the record of lease at rev (or
// now, if compacted): a record is written before its key and deleted after
// it, so a state that shows the key shows it.
func (e *Election) readAttributes(ctx context.Context, lease clientv3.LeaseID, rev int64) (attributes, error) {
	ctx, cancel := context.WithTimeout(ctx, retry.AttemptTimeout)
	defer cancel()
	read := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		return e.o.Client().Txn(ctx).Then(
			clientv3.OpGet(keys.LeaseKey(e.recordPrefix(Preferred), int64(lease)), opts...),
			clientv3.OpGet(keys.LeaseKey(e.recordPrefix(Oldest), int64(lease)), opts...)).Commit()
	}
	resp, err := read(clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = read()
	}
	if err != nil {
		return attributes{}, err
	}
	for i, s := range []Strategy{Preferred, Oldest} {
		for _, kv := range resp.Responses[i].GetResponseRange().Kvs {
			var rec record
			if json.Unmarshal(kv.Value, &rec) == nil && clientv3.LeaseID(kv.Lease) == lease {
				return attributes{rec.Priority, rec.Version, s}, nil
			}
		}
	}
	return attributes{}, nil
}
