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

	// ErrClosed is returned by Lock and TryLock after Close, and by calls
	// waiting when Close began. It is the same value as election.ErrClosed.
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

// Reasons for a loss, wrapped with ErrLost. They are the same values in
// package election, so errors.Is works whichever package is named.
var (
	// ErrKeyGone: the holder's key was deleted, by a delete or by its
	// lease's revocation. A Lock's Context ends with it the moment the
	// deletion is heard, before baton asks etcd which of the two it was;
	// Unlock's error, the logs and the metrics carry ErrKeyDeleted or
	// ErrLeaseExpired instead.
	ErrKeyGone = errs.ErrKeyGone

	// ErrLeaseExpired: the lease expired or was revoked, as seen by a
	// renewal, or told apart after ErrKeyGone.
	ErrLeaseExpired = errs.ErrLeaseExpired

	// ErrKeyDeleted: the holder's key was deleted while its lease lived
	// (told apart after ErrKeyGone).
	ErrKeyDeleted = errs.ErrKeyDeleted

	// ErrRenewalFailed: two lease renewals in a row failed (etcd
	// unreachable, or too slow to answer within TTL/6).
	ErrRenewalFailed = errs.ErrRenewalFailed

	// ErrValidityExpired: the validity deadline (send time of the last
	// acknowledged renewal + TTL − safety margin) passed.
	ErrValidityExpired = errs.ErrValidityExpired

	// ErrSessionClosed: the session given with WithSession was closed,
	// orphaned or lost by its owner.
	ErrSessionClosed = errs.ErrSessionClosed
)
