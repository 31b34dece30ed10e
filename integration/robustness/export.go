package robustness

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// What other suites reuse to judge traffic they drive themselves
// (integration/mixed runs two builds' processes): they fill a History
// with Names, Ops, Holds, Regs and Faults, record etcd's events with an
// EventLog, disturbances with WatchHealth, the round trips of a read
// through the cluster with WatchRoundTrips (Probes) and the whiles their
// own process was not run with a harness.Meter on Now (Stalls), and call
// Check. The free-lock and given-up checks' bound follows the last two:
// without them it is FreeBound alone, and a loaded machine is taken for
// a waiter that missed its turn.

// Check runs every check of a run on the finished history h, with cfg's
// TTL and FreeBound, and returns what they found; the coverage of the
// traffic kinds is the caller's.
func Check(h *History, cfg Config) *Report { return check(h, cfg) }

// Now is the clock of every history: CLOCK_MONOTONIC in nanoseconds, the
// same in every process of the machine.
func Now() int64 { return now() }

// EventLog is etcd's history of every key from revision 1, as one watch
// delivered it, and when each revision arrived.
type EventLog struct{ l *eventLog }

// StartEventLog starts recording; deletions of holds' keys are reported to
// h as they arrive. Nothing must compact past what it received.
func StartEventLog(cli *clientv3.Client, h *History) *EventLog {
	return &EventLog{startEventLog(cli, h)}
}

// Finish puts an end marker, waits for the watch to deliver it, stops the
// watch and moves the events before it into h (Events, Seen, End).
func (e *EventLog) Finish(ctx context.Context, h *History) error { return e.l.finish(ctx, h) }

// WatchHealth probes t's members until ctx ends and hands record every
// while the cluster or this machine was disturbed (a member down, failing
// or behind, this process not scheduled): the free-lock check excuses
// grants near one, unless it was load alone (Disturbance.Load), which
// the bound's round trips and stalls measure instead.
func WatchHealth(ctx context.Context, t Target, record func(Disturbance)) {
	watchHealth(ctx, t, record)
}

// WatchRoundTrips reads a key linearizably through cli every 250 ms until
// ctx ends and hands record each answered read's round trip, in the order
// sent (History.Probes).
func WatchRoundTrips(ctx context.Context, cli *clientv3.Client, record func(Probe)) {
	watchRoundTrips(ctx, cli, record)
}
