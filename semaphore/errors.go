package semaphore

import (
	"errors"

	"github.com/batonhq/baton/internal/errs"
)

var (
	// ErrNoPermit is returned by TryAcquire when all permits are taken, or
	// when earlier waiters are queued for the next one.
	ErrNoPermit = errors.New("semaphore: no permit available")

	// ErrNotHeld is returned by Release and by a Permit's Txn when the
	// permit was lost before the call; it is wrapped with the loss's cause.
	ErrNotHeld = errors.New("semaphore: permit not held")

	// ErrLimitMismatch is returned by Acquire and TryAcquire when the
	// semaphore's stored limit differs from the one given to New; the
	// message names both.
	ErrLimitMismatch = errors.New("semaphore: limit differs from the stored one")
)

// The errors every primitive shares, documented in package session: the
// same values in every package. ErrInvalid also wraps a bad limit.
var (
	ErrInvalid, ErrClosed, ErrTooManyHeld, ErrReleased, ErrLost = errs.ErrInvalid, errs.ErrClosed, errs.ErrTooManyHeld, errs.ErrReleased, errs.ErrLost
	ErrKeyGone, ErrLeaseExpired, ErrKeyDeleted                  = errs.ErrKeyGone, errs.ErrLeaseExpired, errs.ErrKeyDeleted
	ErrRenewalFailed, ErrValidityExpired, ErrSessionClosed      = errs.ErrRenewalFailed, errs.ErrValidityExpired, errs.ErrSessionClosed
)
