package fencing

import (
	"errors"
	"fmt"
)

var (
	// ErrStale is wrapped by every rejection of a token lower than the
	// highest the resource has admitted: the writer's lock or leadership
	// has passed to someone else.
	ErrStale = errors.New("fencing: stale token")

	// ErrMalformed is returned by ParseToken for text that is not a
	// positive decimal int64, and by guards for the zero Token.
	ErrMalformed = errors.New("fencing: malformed token")
)

// StaleError is a rejection: Token was presented for Resource after
// Highest had been admitted. errors.Is(err, ErrStale) holds for it.
type StaleError struct {
	Resource string
	Token    Token
	Highest  Token
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for resource %q: highest admitted is %d", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

var (
	// ErrInvalid is wrapped by constructor errors for a bad or misplaced
	// option, which name the option and its bound, and by EtcdGuard.Write
	// when the caller's operations touch the guard's own fence key.
	ErrInvalid = errors.New("fencing: invalid")

	// ErrContended is returned by EtcdGuard when the fence key kept
	// changing under it for every one of its bounded compare-and-swap
	// attempts: other writers are raising the same resource's token at
	// that very moment. Retrying later is safe.
	ErrContended = errors.New("fencing: fence contended")
)
