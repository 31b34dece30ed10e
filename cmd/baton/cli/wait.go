package cli

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// Causes of a stop the supervisor made by itself, as it reports them.
const (
	causeDeadline = "deadline"   // no extension before the validity deadline
	causeParent   = "baton-died" // baton exited or was killed
	causeStop     = "stop"       // baton asked
	causeRequest  = "request"    // baton passed on a release request
	causeSignal   = "signal"     // the supervisor itself got SIGINT, SIGTERM or SIGHUP
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

// waitBackoff is the pause before another attempt: 100 ms doubling to 2 s,
// short enough that an outage's end is noticed well within a TTL.
func waitBackoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
}

// holderIdentity is the value mutex writes in this process's keys
// ("host:pid"), by which a waiter finds its own place in the queue.
func holderIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// heldFor is how long the holder on lease has held, from its acquisition
// record; -1 if unknown.
func heldFor(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string, lease clientv3.LeaseID) time.Duration {
	held, err := readHeld(ctx, cli, ns, kind, name)
	if err != nil {
		return -1
	}
	since := heldLookup(held, name, lease)
	if since.IsZero() {
		return -1
	}
	return max(time.Since(since), 0)
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
