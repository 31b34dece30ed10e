package rwmutex

import (
	"errors"

	"github.com/batonhq/baton/internal/errs"
)

var (
	// ErrLocked is returned by TryLock when anyone holds or waits for the
	// lock, and by TryRLock when a writer holds or waits for it.
	ErrLocked = errors.New("rwmutex: locked by another holder")

	// ErrNotHeld is returned by Unlock and by a Lock's Txn when the lock
	// was lost before the call; it is wrapped with the loss's cause.
	ErrNotHeld = errors.New("rwmutex: not held")
)

// The errors every primitive shares, documented in package session (the
// same values in every package); ErrClosed is returned by the locking
// calls after Close.
var (
	ErrInvalid, ErrClosed, ErrTooManyHeld, ErrReleased, ErrLost = errs.ErrInvalid, errs.ErrClosed, errs.ErrTooManyHeld, errs.ErrReleased, errs.ErrLost
	ErrKeyGone, ErrLeaseExpired, ErrKeyDeleted                  = errs.ErrKeyGone, errs.ErrLeaseExpired, errs.ErrKeyDeleted
	ErrRenewalFailed, ErrValidityExpired, ErrSessionClosed      = errs.ErrRenewalFailed, errs.ErrValidityExpired, errs.ErrSessionClosed
)
