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

	// ErrClosed is returned by Campaign and Run after Close, and by calls
	// waiting when Close began. It is the same value as mutex.ErrClosed.
	ErrClosed = errs.ErrClosed

	// ErrInvalid is wrapped by every error New returns for a bad name or
	// option, and by Run for a nil function.
	ErrInvalid = errs.ErrInvalid

	// ErrLost is wrapped by the context.Cause of a Term's Context when
	// leadership may be gone, together with one of the reasons below.
	ErrLost = errs.ErrLost

	// ErrTooManyHeld is returned by a call that would exceed WithMaxHeld.
	ErrTooManyHeld = errs.ErrTooManyHeld

	// ErrReleased is the context.Cause of a Term's Context after Resign or
	// Close.
	ErrReleased = errs.ErrReleased
)

// Reasons for a loss, wrapped with ErrLost. They are the same values in
// package mutex, so errors.Is works whichever package is named.
var (
	// ErrKeyGone: the leader's key was deleted, by a delete or by its
	// lease's revocation. A Term's Context ends with it the moment the
	// deletion is heard; Resign's error, the logs and the metrics carry
	// ErrKeyDeleted or ErrLeaseExpired instead, once told apart.
	ErrKeyGone = errs.ErrKeyGone
	// ErrLeaseExpired: the lease expired or was revoked.
	ErrLeaseExpired = errs.ErrLeaseExpired
	// ErrKeyDeleted: the leader's key was deleted while its lease lived.
	ErrKeyDeleted = errs.ErrKeyDeleted
	// ErrRenewalFailed: two lease renewals in a row failed.
	ErrRenewalFailed = errs.ErrRenewalFailed
	// ErrValidityExpired: the validity deadline (send time of the last
	// acknowledged renewal + TTL − safety margin) passed.
	ErrValidityExpired = errs.ErrValidityExpired
	// ErrSessionClosed: the session given with WithSession ended.
	ErrSessionClosed = errs.ErrSessionClosed
)
