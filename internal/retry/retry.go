// Package retry says which etcd errors are worth retrying and retries
// requests that are safe to apply twice.
package retry

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// AttemptTimeout bounds one attempt of a retried request, so that a
// request stuck on a member that lost its leader gives way to a retry on
// another member instead of waiting out etcd's own request timeout.
const AttemptTimeout = time.Second

// ErrAgain is returned by an op whose transaction found a condition it
// compared moved on (and learnt the new state): Transient, so Do tries again.
var ErrAgain = errors.New("a compared state moved on; trying again")

// Transient reports whether err leaves the request's outcome unknown or
// unapplied for a reason that passes: a connection reset, a member
// without a leader, a leader change. Only requests that are safe to apply
// twice (guarded by a CreateRevision, or puts of the same value) are
// retried on it.
func Transient(err error) bool {
	if err == nil || Permanent(err) {
		return false
	}
	for _, t := range []error{
		rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrNotCapable,
		rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrTooManyRequests, ErrAgain,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// Do runs op until it succeeds, fails for good, or ctx ends, and returns
// op's last error. The first attempt runs under ctx alone (the requests are
// marked "require leader", so a member without a leader fails them fast);
// each retry is bounded by AttemptTimeout, so that a request stuck on one
// member gives way to another.
func Do(ctx context.Context, op func(ctx context.Context) error) error {
	err := op(ctx)
	for attempt := 0; err != nil && ctx.Err() == nil && Transient(err); attempt++ {
		if Sleep(ctx, Backoff(attempt)) != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err = op(actx)
		cancel()
	}
	return err
}

// Reads runs op, a read, until it succeeds, fails for good (Permanent), or
// ctx ends: a read is safe to repeat whatever failed it.
func Reads(ctx context.Context, op func(ctx context.Context) error) error {
	err := op(ctx)
	for attempt := 0; err != nil && ctx.Err() == nil && !Permanent(err); attempt++ {
		if Sleep(ctx, Backoff(attempt)) != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err = op(actx)
		cancel()
	}
	return err
}

// Permanent reports whether retrying err cannot help: the caller lacks
// permission, its credentials are refused, or etcd calls the request
// invalid. Such errors are returned to the caller, never retried.
func Permanent(err error) bool {
	for _, p := range []error{
		rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed,
		rpctypes.ErrUserNotFound, rpctypes.ErrAuthOldRevision, rpctypes.ErrInvalidAuthToken,
	} {
		if errors.Is(err, p) {
			return true
		}
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument:
			return true
		}
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument:
		return true
	}
	return false
}

// Backoff is the pause before retry number attempt: 50 ms doubling to 1 s.
func Backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	return min(d, time.Second)
}

// Sleep waits d or until ctx ends, returning ctx's cause then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Loop calls op until op says stop or ctx ends, for work that goes on
// until its caller stops it (a campaign, a watch). After op fails
// (err != nil) it pauses before the next call: first, doubling up to
// most; after op succeeds it calls again at once and the pause starts over.
// failed, if set, is told of each failure and the pause that follows. Loop
// returns op's error when op stops, else ctx's error.
func Loop(ctx context.Context, first, most time.Duration, op func(ctx context.Context) (stop bool, err error), failed func(err error, pause time.Duration)) error {
	pause := first
	for ctx.Err() == nil {
		stop, err := op(ctx)
		switch {
		case stop:
			return err
		case err == nil:
			pause = first
			continue
		}
		if failed != nil {
			failed(err, pause)
		}
		if Sleep(ctx, pause) != nil {
			break
		}
		pause = min(pause*2, most)
	}
	return ctx.Err()
}

// Failure prefers why ctx ended over the request error it caused.
func Failure(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// ReleaseTimeout bounds a release whose caller's ctx has ended.
const ReleaseTimeout = 5 * time.Second

// ReleaseContext is the ctx a release runs with: ctx, without its
// cancellation if it has ended, bounded by ReleaseTimeout if it has no
// deadline. cancel frees it.
func ReleaseContext(ctx context.Context) (_ context.Context, cancel context.CancelFunc) {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	if _, ok := ctx.Deadline(); !ok {
		return context.WithTimeout(ctx, ReleaseTimeout)
	}
	return ctx, func() {}
}
