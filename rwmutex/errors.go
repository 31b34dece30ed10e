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

	// ErrClosed is returned by the locking calls after Close, and by calls
	// waiting when Close began. It is the same value as mutex.ErrClosed.
	ErrClosed = errs.ErrClosed

	// ErrInvalid is wrapped by every error New returns for a bad name or
	// option; the message names the option and its bound.
	ErrInvalid = errs.ErrInvalid

	// ErrLost is wrapped by the context.Cause of a Lock's Context when
	// ownership may be gone, together with one of the reasons below.
	ErrLost = errs.ErrLost

	// ErrTooManyHeld is returned by a call that would exceed WithMaxHeld.
	ErrTooManyHeld = errs.ErrTooManyHeld

	// ErrReleased is the context.Cause of a Lock's Context after Unlock or
	// Close.
	ErrReleased = errs.ErrReleased
)

// Reasons for a loss, wrapped with ErrLost; the same values as in package
// mutex.
var (
	// ErrKeyGone: the holder's key was deleted, by a delete or its lease's
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
