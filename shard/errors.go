package shard

import (
	"errors"

	"github.com/batonhq/baton/internal/errs"
)

var (
	// ErrMoved is the cause of a Shard's Context when the assignment gave the
	// shard to another member (a member joined, or this one owned more than
	// its share): the work should stop, and the shard is released once fn
	// returns or the drain timeout passes.
	ErrMoved = errors.New("shard: moved to another member")

	// ErrCountMismatch is returned by Run when the group's live members use
	// another shard count than this Group's; the error names both counts.
	ErrCountMismatch = errors.New("shard: shard count differs from the group's")

	// ErrDuplicateMember is returned by Run, before it writes anything, when
	// the member name is live in the group on another lease (another
	// process runs it), when another Run of the same name is in progress on
	// the same session (another Group on a shared session), or when another
	// member of the group is live on this Run's lease (one lease runs at
	// most one member of a group). Nothing of the running member is
	// touched.
	ErrDuplicateMember = errors.New("shard: member already runs")

	// ErrNotHeld is returned by a Shard's Txn when the shard was lost or
	// released before the call; it is wrapped together with the cause.
	ErrNotHeld = errors.New("shard: not held")

	// ErrRunning is returned by Run while another Run of the same Group is
	// in progress: one Group is one member.
	ErrRunning = errors.New("shard: the group already runs a member")
)

// The errors every primitive shares, documented in package session: the
// same values in every package. ErrInvalid wraps every refusal of New and
// Run's bad member names; ErrClosed is returned by Run after Close;
// ErrReleased and ErrLost with a reason are a Shard's other causes.
var (
	ErrInvalid, ErrClosed, ErrReleased, ErrLost            = errs.ErrInvalid, errs.ErrClosed, errs.ErrReleased, errs.ErrLost
	ErrKeyGone, ErrLeaseExpired, ErrKeyDeleted             = errs.ErrKeyGone, errs.ErrLeaseExpired, errs.ErrKeyDeleted
	ErrRenewalFailed, ErrValidityExpired, ErrSessionClosed = errs.ErrRenewalFailed, errs.ErrValidityExpired, errs.ErrSessionClosed
)
