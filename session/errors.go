package session

import "github.com/batonhq/baton/internal/errs"

// The errors every primitive shares. mutex, election, semaphore and rwmutex
// re-export them: they are the same values there, so errors.Is works
// whichever package is named.
var (
	// ErrInvalid is wrapped by every error a New returns for a bad name or
	// option; the message names the option and its bound.
	ErrInvalid = errs.ErrInvalid

	// ErrClosed is returned by the acquiring calls (Lock, Campaign, Acquire,
	// Run...) after Close, and by calls waiting when Close began.
	ErrClosed = errs.ErrClosed

	// ErrTooManyHeld is wrapped by the error of an acquisition beyond
	// WithMaxHeld.
	ErrTooManyHeld = errs.ErrTooManyHeld

	// ErrReleased is the context.Cause of a handle's Context after its
	// release (Unlock, Resign, Release) or its primitive's Close.
	ErrReleased = errs.ErrReleased

	// ErrLost is wrapped by the context.Cause of a handle's Context when
	// ownership may be gone, together with one of the reasons below.
	ErrLost = errs.ErrLost
)

// Reasons for a loss, wrapped with ErrLost.
var (
	// ErrKeyGone: the holder's key was deleted, by a delete or by its
	// lease's revocation. A handle's Context ends with it the moment the
	// deletion is heard, before baton asks etcd which of the two it was;
	// the release's error, the logs and the metrics carry ErrKeyDeleted or
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

	// ErrSessionClosed: the etcd session given to WithSession or Wrap was
	// closed, orphaned or lost by its owner. Such a lease is never replaced:
	// acquisitions through it fail with this reason from then on.
	ErrSessionClosed = errs.ErrSessionClosed

	// ErrReplaced: another Campaign of the same election through the same
	// lease took the key over (as etcd's Campaign does); that Campaign's
	// Term leads now.
	ErrReplaced = errs.ErrReplaced
)
