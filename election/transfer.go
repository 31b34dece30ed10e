package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonhq/baton/internal/telemetry"
)

// errNoOne is a Preferred hand-over to the best candidate finding none.
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
	p, err := t.plan(st, to)
	if errors.Is(err, errNoOne) {
		err = fmt.Errorf("transfer to %s: %w", to, ErrNoCandidate)
	}
	if err != nil {
		return err
	}
	if successor, err = t.handOver(ctx, p, ErrTransferred); err != nil {
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
