package robustness

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Disturbance is a while the cluster or this machine was not as the
// free-lock check assumes with faults off: a member down, failing its
// status or behind the others (a restarted member catching up serves its
// watches late), or this process not scheduled for a while (a loaded
// machine). It is no fault; the checks that judge only with no fault
// near excuse it too.
type Disturbance struct {
	Why        string
	Start, End int64
	// Load says it is a symptom of a loaded machine alone: this process
	// unscheduled, a member's status answered too slowly, a member behind
	// the others (applying late; one restarted by a fault catches up in
	// that fault's grace). The free-lock check does not excuse those: its
	// bound follows the run's round trips and stalls instead, and a
	// linearizable read through a member behind waits for it.
	Load bool `json:",omitempty"`
}

// healthWatch probes every member's status each period until ctx ends,
// and records the disturbances.
func (r *runner) healthWatch(ctx context.Context) { watchHealth(ctx, r.cfg.Target, r.h.disturbed) }

func watchHealth(ctx context.Context, t Target, record func(Disturbance)) {
	const period = healthPeriod
	eps := t.Endpoints()
	clis := make([]*clientv3.Client, len(eps))
	for i, ep := range eps {
		c, err := newClient([]string{ep})
		if err != nil {
			return
		}
		clis[i] = c
		defer c.Close()
	}
	var cur *Disturbance
	last := now()
	for ctx.Err() == nil {
		pause(ctx, period)
		at := now()
		why, load := "", false
		if gap := time.Duration(at - last); gap > 3*period {
			why, load = fmt.Sprintf("this process not scheduled for %v", gap.Round(time.Millisecond)), true
		}
		var applied []uint64
		for i, c := range clis {
			if !t.Running(i) {
				why, load = fmt.Sprintf("member %d down", i), false
				break
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, eps[i])
			cancel()
			if err != nil {
				why, load = fmt.Sprintf("member %d status: %v", i, err), errors.Is(err, context.DeadlineExceeded)
				break
			}
			applied = append(applied, st.RaftAppliedIndex)
		}
		if why == "" && len(applied) == len(clis) {
			lo, hi := applied[0], applied[0]
			for _, a := range applied {
				lo, hi = min(lo, a), max(hi, a)
			}
			if hi-lo > 100 {
				// A restarted member catches up within its fault's grace;
				// past it, a member behind is a loaded machine's.
				why, load = fmt.Sprintf("a member %d entries behind", hi-lo), true
			}
		}
		end := now()
		switch {
		case why != "" && cur == nil:
			cur = &Disturbance{Why: why, Start: last, Load: load}
		case why != "" && !load:
			cur.Load = false // more than load after all
		case why == "" && cur != nil:
			cur.End = at
			record(*cur)
			cur = nil
		}
		last = end
	}
	if cur != nil {
		cur.End = now()
		record(*cur)
	}
}

// healthPeriod spaces the health watch's probes; probeTimeout bounds a
// round trip.
const (
	healthPeriod = 250 * time.Millisecond
	probeTimeout = 5 * time.Second
)

// roundTrips reads a key linearizably through the cluster every
// healthPeriod until ctx ends, and records each answered read's round
// trip: the run's own measure of how long one request takes, this
// process's scheduling included.
func (r *runner) roundTrips(ctx context.Context) { watchRoundTrips(ctx, r.admin, r.h.probe) }

func watchRoundTrips(ctx context.Context, cli *clientv3.Client, record func(Probe)) {
	for ctx.Err() == nil {
		pause(ctx, healthPeriod)
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		start := now()
		_, err := cli.Get(pctx, "/robustness/healthy")
		end := now()
		cancel()
		if err == nil {
			record(Probe{At: start, RTT: time.Duration(end - start)})
		}
	}
}
