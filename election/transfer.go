package election

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

// errNoOne is handOverBest finding no other live candidate.
var errNoOne = errors.New("no other live candidate")

// Transfer passes leadership to the candidate whose key is to, as
// Candidates reports it (under Preferred its record key is accepted
// too). The Context ends with ErrTransferred before the successor can
// lead, and the successor's token is greater than this term's.
//
// Under Preferred one transaction deletes this leader's key and record
// and writes the successor's key on the successor's lease, guarded by
// this key being the only one in the election's prefix and the
// successor's record still existing: no third candidate leads in between
// and etcd never shows the election without a leader. The successor's
// Campaign returns once its watch delivers the key (about a round trip).
//
// Under Oldest (the default) to may be any candidate queued behind this
// leader. If it is the next one, Transfer resigns and it leads as after
// any Resign. Otherwise one transaction, guarded by this leader's key and
// to's, deletes the key of each candidate queued between them (leaving a
// mark on its lease) and this leader's key: to's key is then the oldest,
// so etcd's own rule names it leader from that revision (Leader, Observe
// and `etcdctl elect -l` agree), and it leads once its watch delivers the
// deletion, about a round trip. A skipped baton candidate puts its key
// again, behind to (so its token, when it leads, is greater than to's),
// and waits on. A candidate that is not baton's (etcd's
// concurrency.Election, `etcdctl elect`, or a baton release from before
// candidates wrote records) would be misled by such a move or lead beside
// to: while one waits anywhere in the election, Transfer to any but the
// next candidate returns an error wrapping ErrForeignCandidate, naming
// its key, and the term goes on.
//
// If to is not a live candidate (it left, its lease ended, or it is this
// term's) Transfer returns an error wrapping ErrNoCandidate and the term
// goes on, untouched. If it leaves in the moment between that check and
// the hand-over, the term has ended and Transfer resigns (under Preferred
// the best remaining candidate takes over) and returns an error wrapping
// ErrNoCandidate. After the term ended otherwise it returns an error
// wrapping ErrNotLeader.
func (t *Term) Transfer(ctx context.Context, to string) (err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, op := telemetry.HoldFrom(t.hold.Context()).StartTransfer(ctx, int64(t.Token()), to)
	var successor int64 // the new leader's token
	defer func() { op.EndTransfer(transferOutcome(err), successor, err) }()
	if err := t.ended(); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	st, err := t.e.readState(ctx)
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	if t.e.strategy() == Oldest {
		successor, err = t.transferOldest(ctx, st, to)
		return err
	}
	var target *entry
	for _, en := range st.recs[Preferred] {
		if en.key == to || keys.LeaseKey(t.e.Prefix(), int64(en.lease)) == to {
			target = en
		}
	}
	if target == nil || target.lease == t.Lease() {
		return fmt.Errorf("transfer to %s: %w", to, ErrNoCandidate)
	}
	successor, err = t.handTo(ctx, target, ErrTransferred)
	_ = core.Release(ctx, t.hold) // forgets the abandoned hold
	t.dropRecord(ctx)
	if err != nil {
		return fmt.Errorf("transfer to %s: %w", to, err)
	}
	return nil
}

// transferOutcome is the transfer span's outcome of Transfer's error.
func transferOutcome(err error) string {
	switch {
	case err == nil:
		return telemetry.TransferDone
	case errors.Is(err, ErrNoCandidate):
		return telemetry.TransferNoCandidate
	case errors.Is(err, ErrForeignCandidate):
		return telemetry.TransferForeign
	case errors.Is(err, ErrNotLeader):
		return telemetry.TransferNotLeader
	}
	return telemetry.TransferFailed
}

// ended is ErrNotLeader and the cause once the Context ended.
func (t *Term) ended() error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, context.Cause(t.ctx))
	}
	return nil
}

// handOverBest hands over to the best live candidate but this one;
// errNoOne when there is none.
func (t *Term) handOverBest(ctx context.Context, cause error) error {
	st, err := t.e.readState(ctx)
	if err != nil {
		return err
	}
	for _, en := range st.ranked() {
		if en.lease != t.Lease() {
			_, err := t.handTo(ctx, en, cause)
			return err
		}
	}
	return errNoOne
}

// handTo ends the term with cause, then in one transaction deletes this
// leader's key, its record and any request to end its term, and writes
// the successor's key on its lease; it returns the successor's token. On
// a failed condition it deletes its own key and returns an error wrapping
// ErrNoCandidate (or ErrStrategy when a key without a record waits).
func (t *Term) handTo(ctx context.Context, to *entry, cause error) (int64, error) {
	if f := t.e.hooks.beforeHandOver; f != nil {
		f(to.key)
	}
	t.cancel(cause)
	if c := context.Cause(t.ctx); !errors.Is(c, cause) {
		return 0, fmt.Errorf("%w: %w", ErrNotLeader, c) // it ended otherwise meanwhile: nothing to hand over
	}
	// The caller's ctx may be the term's own, ended just now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	prefix, own, lease, token := t.e.Prefix(), t.Key(), t.Lease(), int64(t.Token())
	next := keys.LeaseKey(prefix, int64(to.lease))
	if errors.Is(cause, ErrTransferred) { // the transfer's span says whether the successor got it
		telemetry.HoldFrom(t.hold.Context()).TransferredTo(next)
	}
	defer core.Abandon(t.hold)() // released: the transaction deletes the key
	ops := []clientv3.Op{clientv3.OpDelete(own), clientv3.OpDelete(t.e.endKey(lease)),
		clientv3.OpPut(next, to.Value, clientv3.WithLease(to.lease))}
	if t.rec != nil {
		ops = append(ops, clientv3.OpDelete(t.rec.Key()))
	}
	var resp *clientv3.TxnResponse
	err := retry.Do(ctx, func(actx context.Context) (err error) {
		resp, err = t.e.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(prefix), "=", token).WithPrefix(), // this key alone
				clientv3.Compare(clientv3.CreateRevision(to.key), "=", to.rev)).
			Then(ops...).
			Else(clientv3.OpGet(prefix, clientv3.WithPrefix())).Commit() // not keys-only: that omits the lease (etcd 3.7)
		return err
	})
	if err != nil {
		t.deleteOwn(own, token)
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	var others []string
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		switch {
		case string(kv.Key) == next && clientv3.LeaseID(kv.Lease) == to.lease && kv.CreateRevision > token:
			return kv.CreateRevision, nil // an earlier attempt applied unheard
		case string(kv.Key) != own:
			others = append(others, string(kv.Key))
		}
	}
	t.deleteOwn(own, token)
	if len(others) > 0 {
		return 0, fmt.Errorf("%w: %w: keys without a preferred record wait in the election's prefix (%v); the term was resigned instead", ErrInvalid, ErrStrategy, others)
	}
	return 0, fmt.Errorf("%w: %s left before the hand-over; the term was resigned instead", ErrNoCandidate, to.key)
}

// deleteOwn deletes this term's key, guarded by its CreateRevision, with
// a fresh bounded context: its hold was abandoned.
func (t *Term) deleteOwn(key string, token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = retry.Do(ctx, func(actx context.Context) error {
		_, err := t.e.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).Then(clientv3.OpDelete(key)).Commit()
		return err
	})
}
