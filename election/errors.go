package election

import (
	"errors"

	"github.com/batonhq/baton/internal/errs"
)

var (
	// ErrNoLeader is returned by Leader when no candidate leads.
	ErrNoLeader = errors.New("election: no leader")

	// ErrNotLeader is returned by Proclaim, Resign and a Term's Txn when
	// leadership was lost before the call; it is wrapped together with the
	// loss's cause.
	ErrNotLeader = errors.New("election: not leader")
)

// The errors every primitive shares, documented in package session: the
// same values in every package. ErrClosed is returned by Campaign and Run
// after Close; ErrReleased and ErrLost with a reason are a Term's causes;
// ErrInvalid is also wrapped by Run's error for a nil function.
var (
	ErrInvalid, ErrClosed, ErrTooManyHeld, ErrReleased, ErrLost = errs.ErrInvalid, errs.ErrClosed, errs.ErrTooManyHeld, errs.ErrReleased, errs.ErrLost
	ErrKeyGone, ErrLeaseExpired, ErrKeyDeleted, ErrReplaced     = errs.ErrKeyGone, errs.ErrLeaseExpired, errs.ErrKeyDeleted, errs.ErrReplaced
	ErrRenewalFailed, ErrValidityExpired, ErrSessionClosed      = errs.ErrRenewalFailed, errs.ErrValidityExpired, errs.ErrSessionClosed
)

var (
	// ErrStrategy is wrapped (with ErrInvalid) by an Oldest Campaign on an
	// election that Preferred candidates run, and by Transfer under
	// Preferred when a key without a candidate record (an Oldest
	// candidate's, an etcd concurrency.Election's) waits in the election's
	// prefix.
	ErrStrategy = errors.New("election: candidates disagree on the strategy")

	// ErrNoCandidate is returned by Transfer when the target is not a
	// live candidate of the election (it left, its lease ended, it never
	// was one, or it is the caller); leadership stays with the caller.
	ErrNoCandidate = errors.New("election: no such live candidate")

	// ErrForeignCandidate is returned by Transfer and PrepareHandOver
	// under Oldest for a target that is not the next candidate while a
	// candidate that is not baton's (etcd's concurrency.Election,
	// `etcdctl elect`, an older baton release) waits in the election: a
	// hand-over that skips candidates would mislead it into leading beside
	// the successor. The error names its key; leadership stays with the
	// caller.
	ErrForeignCandidate = errors.New("election: a candidate that is not baton's waits in the election")

	// ErrTransferred is the cause of a Term's Context after Transfer (or
	// Run's hand-over) passed leadership to another candidate.
	ErrTransferred = errors.New("election: leadership transferred")
)
