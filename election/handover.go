package election

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/group"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/telemetry"
)

// Every hand-over of leadership (Transfer, Resign's under Preferred, Run's
// answer to a request to end the term, an operator's forced one) is built
// by newPlan and sent by group.Commit; Resign's release shares its ops
// (releaseOps). What is particular to a strategy is its protocol's: the
// skipped candidates under Oldest (skip.go), the choice of the successor
// under Preferred (coordinate.go); the state both read is candidate.go's.

// plan is one hand-over from the leader of a state to a successor.
type plan struct {
	e        *Election
	from, to Candidate
	mod      int64            // the leader key's ModRevision as read: a takeover or a Proclaim rewrites it
	target   *mvccpb.KeyValue // under Oldest, the successor's key as read
	skipped  string           // under Oldest, the first key skipped; "" if none
	succ     []clientv3.Cmp   // the successor is still the one read
	ops      []clientv3.Op    // the hand-over, the leader's release included
	release  []clientv3.Op    // the leader's release alone
	succRev  int64            // the successor's token, once known
}

// newPlan builds the hand-over from the leader of st, whose strategy is s,
// to the candidate whose key is to (under Preferred its record key too;
// "": the best live one). It returns ErrNoLeader when nobody leads, an
// error wrapping ErrNoCandidate when to is not a live candidate but the
// leader (errNoOne when no candidate is), and under Oldest one wrapping
// ErrForeignCandidate (skipTarget).
func (e *Election) newPlan(st *state, s Strategy, to string) (*plan, error) {
	from, ok := st.leaderCandidate()
	if !ok {
		return nil, ErrNoLeader
	}
	leader, lease := st.leader(), from.LeaseID
	from.Strategy = s
	p := &plan{e: e, mod: leader.ModRevision, from: from}
	rec := st.recs[s][lease]
	p.release = e.releaseOps(p.from.Key, int64(p.from.Token), rec)
	if s == Oldest {
		target, skipped, err := skipTarget(st, to)
		if err != nil {
			return nil, err
		}
		p.target = target
		p.to = Candidate{Key: to, Value: string(target.Value), Token: fencing.Token(target.CreateRevision), LeaseID: clientv3.LeaseID(target.Lease), Strategy: Oldest}
		if len(skipped) > 0 {
			p.skipped = string(skipped[0].Key)
		}
		p.succ = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(to), "=", target.CreateRevision)}
		p.ops = append(e.skipOps(skipped), p.release...) // skipped first: a waiter following the namespace sees its own key go first
		return p, nil
	}
	target := e.preferredTarget(st, lease, to)
	switch {
	case target == nil && to == "":
		return nil, errNoOne
	case target == nil:
		return nil, fmt.Errorf("transfer to %s: %w", to, ErrNoCandidate)
	}
	next := e.keyOf(target)
	p.to = Candidate{Key: next, Value: target.Value, LeaseID: target.lease, Priority: target.Priority, Version: target.Version,
		Strategy: Preferred, Record: target.key}
	p.succ = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Prefix()), "=", leader.CreateRevision).WithPrefix(), // this key alone
		clientv3.Compare(clientv3.CreateRevision(target.key), "=", target.rev)}
	p.ops = append(p.release, clientv3.OpPut(next, target.Value, clientv3.WithLease(target.lease)))
	return p, nil
}

// releaseOps end the leader's key key (created at token), whether it hands
// over or resigns: the key with the namespace's release mark (its holder
// knew first), its lock-delay record (a clean end: no delay runs; an older
// build's leader wrote it where DeleteLegacyRecord looks), any request to
// end its term, and its candidate record rec if still the one read (nil:
// none).
func (e *Election) releaseOps(key string, token int64, rec *entry) []clientv3.Op {
	ns, name := e.Namespace(), e.Name()
	ops := append(queue.Release(key, true, false, 0), clientv3.OpDelete(delay.RecordOf(ns, keys.Election, name, key, token)),
		delay.DeleteLegacyRecord(ns, keys.Election, name, key, token), clientv3.OpDelete(e.endKey(leaseOf(key))))
	if rec != nil {
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(rec.key), "=", rec.rev)},
			[]clientv3.Op{clientv3.OpDelete(rec.key)}, nil))
	}
	return ops
}

// txn is the plan's transaction, guarded by the leader's key as read
// (its CreateRevision and ModRevision). The leader's own (resign) goes on
// with its release if the successor is no longer the one read, in the
// same write; an operator's (not resign) does nothing then, and carries
// the caller's cmps and ops. Else reads the election's keys (not
// keys-only: that omits the lease on etcd 3.7).
func (p *plan) txn(resign bool, cmps []clientv3.Cmp, ops []clientv3.Op) func() ([]clientv3.Cmp, []clientv3.Op, []clientv3.Op) {
	return func() ([]clientv3.Cmp, []clientv3.Op, []clientv3.Op) {
		lead := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.from.Key), "=", int64(p.from.Token)),
			clientv3.Compare(clientv3.ModRevision(p.from.Key), "=", p.mod)}
		reads := []clientv3.Op{clientv3.OpGet(p.e.Prefix(), clientv3.WithPrefix())}
		if !resign {
			return append(append(lead, p.succ...), cmps...), append(append([]clientv3.Op(nil), p.ops...), ops...), reads
		}
		return lead, []clientv3.Op{clientv3.OpTxn(p.succ, p.ops, append(append([]clientv3.Op(nil), p.release...), reads...))}, reads
	}
}

// failed reads a failed condition's answer: an earlier attempt whose reply
// was lost applied when the leader's key is gone (a later one on its lease
// is not it) and, for an operator's, the successor's is as the hand-over
// leaves it. The leader's own needs no more than its key gone, as a
// release (core): the successor may have led and left since, and the
// resign's own branch releases without one. The leader's own goes again
// when its key was rewritten since the read by its own late write, a
// Proclaim whose reply was lost: a takeover ended the term before its
// hand-over began (its cause is not the hand-over's), and none can happen
// since (the hold ended, its key still reserved). An operator's does not:
// the leader changed since it was shown.
func (p *plan) failed(self bool) func(*clientv3.TxnResponse, bool) (bool, bool) {
	return func(resp *clientv3.TxnResponse, unheard bool) (applied, again bool) {
		mine, handed := p.handed(resp.Responses[0].GetResponseRange().Kvs)
		if mine != nil && mine.CreateRevision != int64(p.from.Token) {
			mine = nil
		}
		switch {
		case mine == nil && self:
			return unheard, false
		case mine == nil:
			return unheard && handed, false
		case self && mine.ModRevision != p.mod:
			p.mod = mine.ModRevision
			return false, true
		}
		return false, false
	}
}

// handed returns the leader's key among kvs (the election's keys) and
// whether they show the hand-over made: the successor's key as the
// hand-over leaves it and, under Oldest, no skipped key ahead of it.
func (p *plan) handed(kvs []*mvccpb.KeyValue) (mine *mvccpb.KeyValue, handed bool) {
	var succ, first *mvccpb.KeyValue
	for _, kv := range kvs {
		switch string(kv.Key) {
		case p.from.Key:
			mine = kv
		case p.to.Key:
			succ = kv
		case p.skipped:
			first = kv
		}
	}
	switch {
	case succ == nil:
	case p.target != nil:
		handed = succ.CreateRevision == p.target.CreateRevision && (first == nil || first.CreateRevision > succ.CreateRevision)
	default:
		handed = clientv3.LeaseID(succ.Lease) == p.to.LeaseID && succ.CreateRevision > int64(p.from.Token)
	}
	if handed {
		p.succRev = succ.CreateRevision
	}
	return mine, handed
}

// errEnded is a hand-over not sent: the term had ended otherwise.
var errEnded = errors.New("the term ended before the hand-over")

// handOver ends the term with cause, then commits p, the term's key and
// record ended with it; it returns the successor's token (0 when an
// attempt applied unheard and the successor's key shows it no more). If the
// successor is no longer the one read, the same write resigned the term:
// an error wrapping ErrNoCandidate (or ErrStrategy when, under Preferred,
// keys without a record wait). errEnded when the term had ended otherwise.
func (t *Term) handOver(ctx context.Context, p *plan, cause error) (int64, error) {
	if f := t.e.hooks.beforeHandOver; f != nil {
		f(p.to.Key)
	}
	t.cancel(cause) // before the successor can lead
	if c := context.Cause(t.ctx); !errors.Is(c, cause) {
		return 0, fmt.Errorf("%w: %w: %w", errEnded, ErrNotLeader, c)
	}
	if errors.Is(cause, ErrTransferred) { // the transfer's span says whether the successor got it
		telemetry.HoldFrom(t.hold.Context()).TransferredTo(p.to.Key)
	}
	// The caller's ctx may be the term's own, ended just now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	applied, resp, err := group.Commit(ctx, t.e.o.Client(), t.holds(), group.Change{Txn: p.txn(true, nil, nil), Failed: p.failed(true)})
	switch {
	case err != nil:
		return 0, err
	case !applied:
		return 0, fmt.Errorf("%w: the leader's key was deleted before the hand-over", ErrNotLeader)
	case !resp.Succeeded: // an earlier attempt applied unheard
		return p.succRev, nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	switch {
	case inner.Succeeded && p.target != nil:
		return p.target.CreateRevision, nil
	case inner.Succeeded:
		return resp.Header.Revision, nil
	}
	var others []string
	for _, kv := range inner.Responses[len(p.release)].GetResponseRange().Kvs {
		if string(kv.Key) != p.from.Key {
			others = append(others, string(kv.Key))
		}
	}
	if p.target == nil && len(others) > 0 {
		return 0, fmt.Errorf("%w: %w: keys without a preferred record wait in the election's prefix (%v); the term was resigned instead", ErrInvalid, ErrStrategy, others)
	}
	return 0, fmt.Errorf("%w: %s left before the hand-over; the term was resigned instead", ErrNoCandidate, p.to.Key)
}

// plan builds this term's hand-over to to ("": the best candidate, under
// Preferred) from st; ErrNotLeader when st's leader is not this term.
func (t *Term) plan(st *state, to string) (*plan, error) {
	if l := st.leader(); l == nil || string(l.Key) != t.Key() || l.CreateRevision != int64(t.Token()) {
		return nil, fmt.Errorf("%w: the election's first key is no longer this term's", ErrNotLeader)
	}
	return t.e.newPlan(st, t.e.strategy(), to)
}

// holds are the term's key and its candidate record, which a hand-over or
// a Resign ends in one write.
func (t *Term) holds() []*core.Hold {
	if t.rec == nil {
		return []*core.Hold{t.hold}
	}
	return []*core.Hold{t.hold, t.rec}
}

// HandOver is a hand-over of leadership prepared by PrepareHandOver, such
// as an operator's forced one, which writes an audit record with it:
// Commit sends it.
type HandOver struct {
	From, To Candidate
	cli      *clientv3.Client
	p        *plan
}

// PrepareHandOver prepares the hand-over from the current leader to the
// candidate whose key is to, built as the leader's own Transfer builds it:
// under Preferred the leader's key, record and end request are deleted and
// to's key written on to's lease; under Oldest the leader's key is deleted
// with those of the candidates queued between the two (ErrForeignCandidate
// when one that is not baton's waits); in both, with the namespace's
// release mark and the leader's lock-delay record, so that no delay runs.
// It returns ErrNoLeader when nobody leads and an error wrapping
// ErrNoCandidate when to is not a live candidate. It writes nothing.
func (e *Election) PrepareHandOver(ctx context.Context, to string) (HandOver, error) {
	st, err := e.readState(ctx)
	if err != nil {
		return HandOver{}, err
	}
	s := Oldest
	if l := st.leader(); l != nil && st.recs[Preferred][clientv3.LeaseID(l.Lease)] != nil {
		s = Preferred
	}
	if to == "" {
		return HandOver{}, fmt.Errorf("hand over to %q: %w", to, ErrNoCandidate)
	}
	p, err := e.newPlan(st, s, to)
	if err != nil {
		return HandOver{}, fmt.Errorf("hand over: %w", err)
	}
	return HandOver{From: p.from, To: p.to, cli: e.o.Client(), p: p}, nil
}

// Commit makes the hand-over in one transaction with the caller's own
// cmps and ops (an audit record), guarded by the leader's key being as
// read (a Proclaim since rewrote it) and the target still waiting. It is
// retried through lost replies, and an attempt that applied unheard counts
// as done. It reports false, having written nothing, if the leader or the
// target changed since PrepareHandOver; the leader's Term, if it still
// runs, ends when its watch sees its key go.
func (h HandOver) Commit(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	if h.p == nil {
		return false, fmt.Errorf("%w: a HandOver not made by PrepareHandOver", ErrInvalid)
	}
	done, _, err := group.Commit(ctx, h.cli, nil, group.Change{Txn: h.p.txn(false, cmps, ops), Failed: h.p.failed(false)})
	return done, err
}
