package hold

import (
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/batonhq/baton/mutex"
)

// worthWaiting reports whether a failed acquisition should be tried again
// by a waiting lock or campaign: an outage, a lost lease (the next attempt
// gets a new one), anything but a refusal or a misuse that retrying cannot
// fix.
func worthWaiting(err error) bool {
	for _, fatal := range []error{
		mutex.ErrClosed, mutex.ErrInvalid, mutex.ErrTooManyHeld,
		rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrAuthFailed,
		rpctypes.ErrUserNotFound, rpctypes.ErrAuthNotEnabled, rpctypes.ErrInvalidAuthToken,
	} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	return true
}

// closeBound is how long baton waits on its way out for the lease to be
// revoked; past it, an unreachable etcd lets the lease expire by its TTL.
const closeBound = 500 * time.Millisecond

// closeBounded runs close (a Mutex's or an Election's) for at most
// closeBound, so that an outage does not delay baton's exit; the revoke
// goes on until the process exits.
func closeBounded(closeFn func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = closeFn()
	}()
	t := time.NewTimer(closeBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
