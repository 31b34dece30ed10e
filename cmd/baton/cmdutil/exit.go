package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batonhq/baton/router"
)

// Exit codes. 64, 69, 75, 77 and 78 follow sysexits.h; a child's own status,
// which baton lock and baton elect pass through, may take any value, so a
// script that must tell them apart should have its command avoid these.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: any failure without a code of its own (etcd refused a
	// request, permission denied, the lock is free, a demo invariant broke).
	ExitError = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 64
	// ExitUnavailable: etcd could not be reached within --dial-timeout or
	// --command-timeout.
	ExitUnavailable = 69
	// ExitNotAcquired: lock --try found the lock held, or lock --timeout
	// ran out before it was acquired.
	ExitNotAcquired = 75
	// ExitRefused: unlock --force refused because the holder's lease is
	// being renewed (the holder looks alive) and --even-if-alive was not
	// given.
	ExitRefused = 77
	// ExitDenied: etcd refused this client: the TLS handshake failed (a
	// certificate refused by either side), authentication failed (wrong
	// password, unknown user), or permission was denied; or, with a
	// cluster map, the etcd cluster that answers is not the one the map
	// pins. Retrying does not help, unlike ExitUnavailable.
	ExitDenied = 78
	// ExitOwnershipLost: the lock or leadership may have been lost while
	// held (its command, if any, was stopped), or elect --once lost it.
	ExitOwnershipLost = 79
	// ExitPartial: with a cluster map, some clusters did not answer (or,
	// for baton version, some endpoints); the others' results were
	// printed, and the output names the ones missing.
	ExitPartial = 3
)

// CodedError carries an exit code. A silent one is not printed (the
// child's status, or a refusal already explained on the output).
type CodedError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *CodedError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *CodedError) Unwrap() error { return e.Err }

func WithCode(code int, err error) error { return &CodedError{Code: code, Err: err} }

func UsageErrorf(format string, args ...any) error {
	return WithCode(ExitUsage, fmt.Errorf(format, args...))
}

// ChildStatus passes a child's exit status through without a message.
func ChildStatus(code int) error {
	if code == ExitOK {
		return nil
	}
	return &CodedError{Code: code, Silent: true}
}

// ExitCode is the process exit code for an error RunE returned.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *CodedError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if isUnavailable(err) {
		return ExitUnavailable
	}
	if IsDenied(err) || errors.Is(err, router.ErrIdentity) {
		return ExitDenied
	}
	return ExitError
}

// IsDenied reports whether etcd refused the client's identity or its
// rights, as opposed to being unreachable.
func IsDenied(err error) bool {
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrGRPCPermissionDenied,
		rpctypes.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed, rpctypes.ErrInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthToken,
		rpctypes.ErrUserEmpty, rpctypes.ErrGRPCUserEmpty, rpctypes.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled,
		rpctypes.ErrUserNotFound, rpctypes.ErrGRPCUserNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	if s, ok := status.FromError(err); ok {
		// etcd's own auth package answers some refusals ("password was
		// given for no password user") with code Unknown.
		return s.Code() == codes.PermissionDenied || s.Code() == codes.Unauthenticated ||
			s.Code() == codes.Unknown && strings.HasPrefix(s.Message(), "auth: ")
	}
	return false
}

// isUnavailable reports whether err means etcd could not be reached, as
// opposed to etcd answering no.
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, rpctypes.ErrGRPCNoLeader) || errors.Is(err, rpctypes.ErrNoLeader) {
		return true
	}
	if s, ok := status.FromError(err); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		return true
	}
	return false
}
