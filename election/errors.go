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
