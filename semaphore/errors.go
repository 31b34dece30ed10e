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

	// ErrClosed is returned by Acquire and TryAcquire after Close, and by
	// calls waiting when Close began. It is the same value as
	// mutex.ErrClosed.
	ErrClosed = errs.ErrClosed

	// ErrInvalid is wrapped by every error New returns for a bad name,
	// limit or option; the message names the field and its bound.
	ErrInvalid = errs.ErrInvalid

	// ErrLost is wrapped by the context.Cause of a Permit's Context when
	// the permit may be gone, together with one of the reasons below.
	ErrLost = errs.ErrLost

	// ErrTooManyHeld is returned by a call that would exceed WithMaxHeld.
	ErrTooManyHeld = errs.ErrTooManyHeld

	// ErrReleased is the context.Cause of a Permit's Context after Release
	// or Close.
	ErrReleased = errs.ErrReleased
)

// Reasons for a loss, wrapped with ErrLost; the same values as in package
// mutex.
var (
	// ErrKeyGone: the permit's key was deleted, by a delete or its lease's
	// revocation (the Context's cause as the deletion is heard).
	ErrKeyGone = errs.ErrKeyGone
	// ErrLeaseExpired: the lease expired or was revoked.
	ErrLeaseExpired = errs.ErrLeaseExpired
	// ErrKeyDeleted: the key was deleted while its lease lived.
	ErrKeyDeleted = errs.ErrKeyDeleted
	// ErrRenewalFailed: two lease renewals in a row failed.
	ErrRenewalFailed = errs.ErrRenewalFailed
	// ErrValidityExpired: the validity deadline passed.
	ErrValidityExpired = errs.ErrValidityExpired
	// ErrSessionClosed: the session given with WithSession ended.
	ErrSessionClosed = errs.ErrSessionClosed
)
