// Package errs holds the sentinel errors that mutex and election share, so
// that errors.Is works whichever package the caller names. Each public
// package re-exports them in its errors.go with its own documentation.
package errs

import (
	"errors"
	"fmt"

	"github.com/batonhq/baton/internal/keys"
)

var (
	// ErrInvalid is wrapped by every validation error.
	ErrInvalid = keys.ErrInvalid
	// ErrClosed is returned by blocking calls after Close.
	ErrClosed = errors.New("baton: closed")
	// ErrLost is wrapped by the cause of every ownership loss.
	ErrLost = errors.New("baton: ownership lost")
	// ErrReleased is the cause after Unlock, Resign or Close.
	ErrReleased = errors.New("baton: released")
	// ErrLeaseExpired: the holder's lease expired or was revoked.
	ErrLeaseExpired = errors.New("lease expired or revoked")
	// ErrKeyDeleted: the holder's key was deleted while its lease lived.
	ErrKeyDeleted = errors.New("key deleted")
	// ErrRenewalFailed: two renewals in a row failed.
	ErrRenewalFailed = errors.New("two lease renewals in a row failed")
	// ErrValidityExpired: the validity deadline passed before a renewal was acknowledged.
	ErrValidityExpired = errors.New("validity deadline passed")
	// ErrSessionClosed: a session given with WithSession was closed or orphaned.
	ErrSessionClosed = errors.New("session closed")
	// ErrReplaced: another campaign through the same lease took the key over.
	ErrReplaced = errors.New("key taken over by another campaign on the same lease")
)

// Lost returns the cause for a loss with the given reason: an error that
// wraps both ErrLost and reason.
func Lost(reason error) error { return fmt.Errorf("%w: %w", ErrLost, reason) }

// Reason is the label value for a loss reason in metrics and logs.
func Reason(cause error) string {
	switch {
	case errors.Is(cause, ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(cause, ErrKeyDeleted):
		return "key_deleted"
	case errors.Is(cause, ErrRenewalFailed):
		return "renewal_failed"
	case errors.Is(cause, ErrValidityExpired):
		return "validity_expired"
	case errors.Is(cause, ErrSessionClosed):
		return "session_closed"
	case errors.Is(cause, ErrReplaced):
		return "replaced"
	case errors.Is(cause, ErrReleased):
		return "released"
	}
	return "other"
}

// ErrTooManyHeld: a session already has as many keys as WithMaxHeld allows.
var ErrTooManyHeld = errors.New("baton: too many locks held or awaited through one session")

// ErrKeyGone: the holder's key was deleted, by a delete or by its lease's
// revocation; the cause a hold's context ends with at once, before the two
// can be told apart.
var ErrKeyGone = errors.New("key deleted or its lease revoked")
