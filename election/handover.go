package election

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
)

// HandOver is a hand-over of leadership prepared for a caller's own
// transaction, such as an operator's forced one that writes an audit
// record with it: commit If and Then in one transaction (with the
// caller's own comparisons and operations); if it does not succeed, the
// leader or the target changed meanwhile and nothing was done.
type HandOver struct {
	From, To Candidate
	If       []clientv3.Cmp
	Then     []clientv3.Op
}

// PrepareHandOver prepares the hand-over from the current leader to the
// candidate whose key is to, as Transfer does it from the leader's side:
// under Preferred the leader's key, record and end request are deleted and
// to's key written on to's lease; under Oldest the leader's key is deleted
// with those of the candidates queued between the two, as Transfer does
// (ErrForeignCandidate when one that is not baton's waits). It returns
// ErrNoLeader when nobody leads and an error wrapping ErrNoCandidate when
// to is not a live candidate. It writes nothing.
func (e *Election) PrepareHandOver(ctx context.Context, to string) (HandOver, error) {
	st, err := e.readState(ctx)
	if err != nil {
		return HandOver{}, err
	}
	leader := st.leader()
	if leader == nil {
		return HandOver{}, ErrNoLeader
	}
	from := Candidate{Key: string(leader.Key), Value: string(leader.Value), Token: fencing.Token(leader.CreateRevision),
		LeaseID: clientv3.LeaseID(leader.Lease), Leader: true, Strategy: Oldest}
	lrec := st.recs[Preferred][from.LeaseID]
	if lrec == nil {
		next, skipped, err := skipTarget(st, to)
		if err != nil {
			return HandOver{}, fmt.Errorf("hand over: %w", err)
		}
		ho := HandOver{From: from,
			To: Candidate{Key: to, Value: string(next.Value), Token: fencing.Token(next.CreateRevision), LeaseID: clientv3.LeaseID(next.Lease), Strategy: Oldest},
			If: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(from.Key), "=", int64(from.Token)),
				clientv3.Compare(clientv3.CreateRevision(to), "=", next.CreateRevision)},
			Then: append(e.skipOps(skipped), clientv3.OpDelete(from.Key))}
		return ho, nil
	}
	from.Strategy, from.Priority, from.Version, from.Record = Preferred, lrec.Priority, lrec.Version, lrec.key
	var target *entry
	for _, en := range st.recs[Preferred] {
		if (en.key == to || e.keyOf(en) == to) && en.lease != from.LeaseID {
			target = en
		}
	}
	if target == nil {
		return HandOver{}, fmt.Errorf("hand over to %s: %w", to, ErrNoCandidate)
	}
	next := e.keyOf(target)
	return HandOver{From: from,
		To: Candidate{Key: next, Value: target.Value, LeaseID: target.lease, Priority: target.Priority, Version: target.Version,
			Strategy: Preferred, Record: target.key},
		If: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Prefix()), "=", int64(from.Token)).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(target.key), "=", target.rev)},
		Then: []clientv3.Op{clientv3.OpDelete(from.Key), clientv3.OpDelete(lrec.key), clientv3.OpDelete(e.endKey(from.LeaseID)),
			clientv3.OpPut(next, target.Value, clientv3.WithLease(target.lease))}}, nil
}

// RequestEnd asks the leader to end its term and hand over to the
// candidate whose key is to (empty, under Preferred only: the best one),
// as a better candidate does: the leader's Term.EndRequested closes, and
// Run hands over at once (with Transfer) once fn returns. by names the requester in Term.EndRequest. The request
// lives on a lease of its own granted for within (at least 2 s), so it
// vanishes if the leader ignores it. It returns the leader asked;
// ErrNoLeader when nobody leads, an error wrapping ErrStrategy for an
// empty to under Oldest (there is no best candidate to choose), and
// PrepareHandOver's errors for to.
func (e *Election) RequestEnd(ctx context.Context, to, by string, within time.Duration) (Candidate, error) {
	if within < 2*time.Second {
		return Candidate{}, fmt.Errorf("%w: RequestEnd: within %v: must be at least 2s (etcd's shortest lease)", ErrInvalid, within)
	}
	h, err := e.leaderOnly(ctx)
	if err != nil {
		return Candidate{}, err
	}
	if h.From.Strategy != Preferred && to == "" {
		return h.From, fmt.Errorf("%w: %w: election %q uses the oldest strategy: its leader takes requests to hand over to a named candidate only", ErrInvalid, ErrStrategy, e.Name())
	}
	if to != "" {
		if h, err = e.PrepareHandOver(ctx, to); err != nil {
			return Candidate{}, err
		}
	}
	cli := e.o.Client()
	g, err := cli.Grant(ctx, int64((within+time.Second-1)/time.Second))
	if err != nil {
		return h.From, err
	}
	b, _ := json.Marshal(EndRequest{By: by, To: to, Deadline: within.String()})
	key := e.endKey(h.From.LeaseID)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.From.Key), "=", int64(h.From.Token)),
			clientv3.Compare(clientv3.ModRevision(key), "<", int64(h.From.Token))).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(g.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("the leader changed, or was already asked to end its term")
	}
	if err != nil {
		_, _ = cli.Revoke(context.WithoutCancel(ctx), g.ID)
	}
	return h.From, err
}

// leaderOnly is PrepareHandOver's From without a target.
func (e *Election) leaderOnly(ctx context.Context) (HandOver, error) {
	st, err := e.readState(ctx)
	if err != nil {
		return HandOver{}, err
	}
	leader := st.leader()
	if leader == nil {
		return HandOver{}, ErrNoLeader
	}
	from := Candidate{Key: string(leader.Key), Value: string(leader.Value), Token: fencing.Token(leader.CreateRevision), LeaseID: clientv3.LeaseID(leader.Lease), Leader: true, Strategy: Oldest}
	if st.recs[Preferred][from.LeaseID] != nil {
		from.Strategy = Preferred
	}
	return HandOver{From: from}, nil
}
