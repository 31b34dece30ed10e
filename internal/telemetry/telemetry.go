// Package telemetry holds baton's OpenTelemetry spans: the tracer lookup,
// the attribute keys of docs/telemetry.md, and the spans of a wait, a hold,
// a release and a fencing check, so that every primitive records them the
// same way with a few calls.
//
// Nothing here costs more than a span start when the spans are not
// recorded (the global provider's default): attributes, links and events
// are built only for a recording span.
package telemetry

import (
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every baton span.
const ScopeName = "github.com/batonhq/baton"

// Attribute keys (docs/telemetry.md).
const (
	LockName          = attribute.Key("baton.lock.name")
	LockNamespace     = attribute.Key("baton.lock.namespace")
	LockPrimitive     = attribute.Key("baton.lock.primitive")
	LockMode          = attribute.Key("baton.lock.mode")
	LockKey           = attribute.Key("baton.lock.key")
	LockQueuePosition = attribute.Key("baton.lock.queue_position")
	LockOutcome       = attribute.Key("baton.lock.outcome")
	SemaphoreLimit    = attribute.Key("baton.semaphore.limit")
	LeaseID           = attribute.Key("baton.lease.id")
	LeaseTTL          = attribute.Key("baton.lease.ttl")
	HoldOutcome       = attribute.Key("baton.hold.outcome")
	LossReason        = attribute.Key("baton.loss.reason")
	LossCause         = attribute.Key("baton.loss.cause")
	ReleaseRequester  = attribute.Key("baton.release.requester")
	ElectionCandidate = attribute.Key("baton.election.candidate")
	SuccessorToken    = attribute.Key("baton.election.successor_token")
	TransferOutcome   = attribute.Key("baton.transfer.outcome")
	FencingToken      = attribute.Key("baton.fencing.token")
	FencingResource   = attribute.Key("baton.fencing.resource")
	FencingGuard      = attribute.Key("baton.fencing.guard")
	FencingHighWater  = attribute.Key("baton.fencing.high_water")
	FencingOutcome    = attribute.Key("baton.fencing.outcome")
	ErrorMessage      = attribute.Key("baton.error.message")
)

// Primitives: values of baton.lock.primitive.
const (
	Mutex     = "mutex"
	Election  = "election"
	Semaphore = "semaphore"
	RWMutex   = "rwmutex"
)

// Outcomes of a wait: values of baton.lock.outcome.
const (
	Acquired  = "acquired"
	Busy      = "busy"      // a try found it held
	Cancelled = "cancelled" // the caller's context ended, or Close
	Refused   = "refused"   // etcd refused for good: permission, auth, invalid
	Lost      = "lost"      // the lease ended while waiting
	Failed    = "error"     // anything else
)

// Outcomes of a hold: values of baton.hold.outcome.
const (
	Released    = "released"
	HoldLost    = "lost"
	Transferred = "transferred"
)

// Outcomes of a transfer: values of baton.transfer.outcome.
const (
	TransferDone        = "transferred"
	TransferNoCandidate = "no_candidate" // the target is not a live candidate, or left before the hand-over
	TransferForeign     = "foreign"      // under oldest, a candidate that is not baton's waits
	TransferNotLeader   = "not_leader"   // the term had already ended
	TransferFailed      = "error"
)

// Outcomes of a fencing check: values of baton.fencing.outcome.
const (
	Admitted  = "admitted"
	Stale     = "stale"
	Malformed = "malformed"
	// Failed ("error") when the guard could not decide.
)

// Event names.
const (
	EventRenewalFailed    = "baton.renewal.failed"
	EventReleaseRequested = "baton.release.requested"
	EventPreempted        = "baton.hold.preempted"
	EventLost             = "baton.hold.lost"
)

// Tracer returns the tracer of tp, or of the global provider when tp is
// nil. The global provider is a no-op until the application installs one,
// and a tracer taken from it before then follows the installation.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

func errAttr(err error) attribute.KeyValue { return ErrorMessage.String(msg(err)) }

func msg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// leaseHex writes a lease ID as baton's logs and CLI do.
func leaseHex(id int64) string { return strconv.FormatInt(id, 16) }
