package mutex

import (
	"errors"

	"github.com/batonhq/baton/internal/errs"
)

var (
	// ErrLocked is returned by TryLock when another contender holds the lock.
	ErrLocked = errors.New("mutex: locked by another holder")

	// ErrNotHeld is returned by Unlock and by a Lock's Txn when the lock was
	// lost before the call; it is wrapped together with the loss's cause.
	ErrNotHeld = errors.New("mutex: not held")
)

// The errors every primitive shares, documented in package session: the
// same values in every package. ErrClosed is returned by Lock and TryLock
// after Close; ErrReleased and ErrLost with a reason are a Lock's causes.
var (
	ErrInvalid, ErrClosed, ErrTooManyHeld, ErrReleased, ErrLost = errs.ErrInvalid, errs.ErrClosed, errs.ErrTooManyHeld, errs.ErrReleased, errs.ErrLost
	ErrKeyGone, ErrLeaseExpired, ErrKeyDeleted                  = errs.ErrKeyGone, errs.ErrLeaseExpired, errs.ErrKeyDeleted
	ErrRenewalFailed, ErrValidityExpired, ErrSessionClosed      = errs.ErrRenewalFailed, errs.ErrValidityExpired, errs.ErrSessionClosed
)
