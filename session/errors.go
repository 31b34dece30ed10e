package session

import "github.com/batonhq/baton/internal/errs"

var (
	// ErrInvalid is wrapped by every error of New for a bad option.
	ErrInvalid = errs.ErrInvalid
	// ErrTooManyHeld is wrapped by the error of an acquisition beyond
	// WithMaxHeld.
	ErrTooManyHeld = errs.ErrTooManyHeld
)
