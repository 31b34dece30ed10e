package serve

import (
	"errors"
	"fmt"
	"strings"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/shard"
)

// The service's own causes of a hold's end, beside the library's.
var (
	errHeartbeatTimeout = errors.New("the caller's heartbeats stopped: its validity deadline passed")
	errStreamClosed     = errors.New("the caller's stream ended")
	errServerShutdown   = errors.New("the server is shutting down")
	errReleasedByCaller = errors.New("released by the caller")
	// errTransferred ends a term the caller handed over (Transfer): a
	// release by the caller, whose key is the successor's.
	errTransferred = fmt.Errorf("%w: leadership transferred", errReleasedByCaller)
)

// causeOf maps an end's cause to the API's.
func causeOf(err error) batonv1.Cause {
	switch {
	case errors.Is(err, errHeartbeatTimeout):
		return batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT
	case errors.Is(err, errStreamClosed):
		return batonv1.Cause_CAUSE_STREAM_CLOSED
	case errors.Is(err, errServerShutdown):
		return batonv1.Cause_CAUSE_SERVER_SHUTDOWN
	case errors.Is(err, errReleasedByCaller), errors.Is(err, mutex.ErrReleased):
		return batonv1.Cause_CAUSE_RELEASED
	case errors.Is(err, mutex.ErrLeaseExpired):
		return batonv1.Cause_CAUSE_LEASE_EXPIRED
	case errors.Is(err, mutex.ErrKeyGone), errors.Is(err, mutex.ErrKeyDeleted):
		return batonv1.Cause_CAUSE_KEY_GONE
	case errors.Is(err, mutex.ErrRenewalFailed):
		return batonv1.Cause_CAUSE_RENEWAL_FAILED
	case errors.Is(err, mutex.ErrValidityExpired):
		return batonv1.Cause_CAUSE_VALIDITY_EXPIRED
	case errors.Is(err, mutex.ErrSessionClosed):
		return batonv1.Cause_CAUSE_SESSION_CLOSED
	case errors.Is(err, shard.ErrMoved):
		return batonv1.Cause_CAUSE_MOVED
	}
	return batonv1.Cause_CAUSE_UNSPECIFIED
}

// causeLabel is a cause as a metric label: "heartbeat_timeout".
func causeLabel(c batonv1.Cause) string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "CAUSE_"))
}
