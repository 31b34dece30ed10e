package robustness

import (
	"context"
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
}

// healthWatch probes every member's status each period until ctx ends,
// and records the disturbances.
func (r *runner) healthWatch(ctx context.Context) { watchHealth(ctx, r.cfg.Target, r.h.disturbed) }

func watchHealth(ctx context.Context, t Target, record func(Disturbance)) {
	const period = 250 * time.Millisecond
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
		why := ""
		if gap := time.Duration(at - last); gap > 3*period {
			why = fmt.Sprintf("this process not scheduled for %v", gap.Round(time.Millisecond))
		}
		var applied []uint64
		for i, c := range clis {
			if !t.Running(i) {
				why = fmt.Sprintf("member %d down", i)
				break
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, eps[i])
			cancel()
			if err != nil {
				why = fmt.Sprintf("member %d status: %v", i, err)
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
				why = fmt.Sprintf("a member %d entries behind", hi-lo)
			}
		}
		end := now()
		switch {
		case why != "" && cur == nil:
			cur = &Disturbance{Why: why, Start: last}
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
