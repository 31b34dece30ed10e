package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// judge sets the target of a measure the issue sets one for, and whether
// baton met it in this run.
func judge(rep *Report, m *Measure) {
	cfg := rep.Config
	b, r := m.Baton, m.Raw
	var target string
	var ok bool
	tail := func() {
		target = "baton ≤ 5 ms and ≤ raw/10"
		ok = b.Median <= 5 && b.Median*10 <= r.Median
	}
	switch m.Workload + "/" + m.Metric {
	case "lock-unlock-shared/cycles/s", "lock-unlock-per-lock/cycles/s", "distinct-16/cycles/s":
		target, ok = "baton ≥ 0.9 × raw", b.Median >= 0.9*r.Median
	case "distinct-64/cycles/s":
		target, ok = "baton ≥ 0.95 × raw", b.Median >= 0.95*r.Median
	case "lock-unlock-shared/cycle p50 ms", "lock-unlock-per-lock/cycle p50 ms":
		target, ok = "baton ≤ 1.10 × raw", b.Median <= 1.10*r.Median
	case "contend/handoff p99 ms", "graceful/failover p99 ms":
		tail()
	case "graceful/observe p50 ms", "graceful/observe p99 ms":
		floorMetric := strings.Replace(m.Metric, "observe", "observe floor", 1)
		target = "baton ≤ 1.10 × the bare-watch floor"
		if f := find(rep, m.Workload, floorMetric); f != nil {
			ok = b.Median <= 1.10*f.Baton.Median
			target += fmt.Sprintf(" (%.3g ms): baton at %.2f × the floor", f.Baton.Median, b.Median/f.Baton.Median)
		}
	case "contend/% of the floor":
		// Each run against the floor measured right after it: a machine
		// whose load drifts between runs moves both alike.
		target = fmt.Sprintf("baton ≥ 90 %% of the floor of its own run; median of the runs %.0f %%", b.Median)
		ok = b.Median >= 90
		// The lock floor sends baton's requests without the library: the
		// distance between the two floors is what those requests cost.
		if f, l := find(rep, m.Workload, "floor turns/s"), find(rep, m.Workload, "lock floor turns/s"); f != nil && l != nil {
			target += fmt.Sprintf(" (the lock floor: %.0f %% of the floor)", 100*l.Baton.Median/f.Baton.Median)
		}
	case "handover/after return p99 ms":
		target = "baton's Transfer past the next candidate ≤ 5 ms, as the graceful failover (from the call's return); raw column: raw's resign to the next"
		ok = b.Median <= 5
	case "contend-lock-delay/handoff p99 ms":
		target = fmt.Sprintf("baton with WithLockDelay(%v) ≤ 5 ms; raw column: baton without one", lockDelay)
		ok = b.Median <= 5
	case "contend/share spread %":
		target, ok = "baton ≤ 10 % in every run", b.Max <= 10
	case "crash/failover max ms":
		limit := cfg.CrashTTL + time.Second
		target, ok = fmt.Sprintf("baton ≤ TTL + 1 s = %v in every run", limit), b.Max <= harness.Ms(limit)
	case "crash/trials zombie late":
		target, ok = "baton 0 in every run", b.Max == 0
	case "held/heap bytes/lock", "held/heap bytes/lock (session.New)", "held/heap bytes/lock (WithSession(etcd session))":
		target, ok = "baton ≤ 1 KiB in every run", b.Max <= 1024
	case "held/goroutines/lock", "held/goroutines/lock (session.New)", "held/goroutines/lock (WithSession(etcd session))":
		target, ok = "baton < 0.01 in every run (no goroutine per lock)", b.Max < 0.01
	case "held/renewals/s":
		// One renewal per TTL/3 from the session's own keepalive and one
		// from baton's shared watchdog, whatever the number of locks.
		perTTL3 := 1 / (cfg.HeldTTL / 3).Seconds()
		limit := 2*perTTL3 + 1/cfg.HeldWindow.Seconds()
		target, ok = fmt.Sprintf("baton ≤ 2 per TTL/3 (%.2f/s), not per lock", limit), b.Max <= limit
	case "waiters/requests/handoff":
		small := find(rep, m.Workload, "requests/handoff, 1/10 the waiters")
		target = "baton constant: within 0.5 of the figure with 1/10 the waiters"
		ok = small != nil && b.Median-small.Baton.Median <= 0.5 && small.Baton.Median-b.Median <= 0.5
	case "waiters/out of order":
		target, ok = "baton 0 in every run", b.Max == 0
	case "serve-cycle/cycle p50 ms (gRPC)", "serve-cycle/cycle p50 ms (HTTP/JSON)":
		// What a remote caller pays over the library: its Hold and its
		// Release are a round trip each to the server, beside the
		// library's own etcd requests in the server.
		proto := strings.TrimSuffix(strings.TrimPrefix(m.Metric, "cycle p50 ms ("), ")")
		target = "service ≤ library + 1 round trip; raw column: the library's mutex Lock+Unlock on a shared session"
		if f := find(rep, m.Workload, "round trip p50 ms ("+proto+")"); f != nil && f.Baton.Median > 0 {
			added := (b.Median - r.Median) / f.Baton.Median
			ok = added <= 1
			target += fmt.Sprintf(" (a round trip, a unary call answered without etcd: %.3g ms): the service adds %.2f round trips, of which its two calls (Hold, Release) are 2", f.Baton.Median, added)
			if c := find(rep, m.Workload, "closing cycle p50 ms ("+proto+")"); c != nil {
				target += fmt.Sprintf("; released by closing the stream (one call): %.2f", (c.Baton.Median-r.Median)/f.Baton.Median)
			}
			if fl := find(rep, m.Workload, "floor cycle p50 ms ("+proto+")"); fl != nil {
				target += fmt.Sprintf("; the protocol's floor (the same two calls on a lock in memory, floorHold): %.3g ms, %.2f round trips, so the service's own work is %.2f", fl.Baton.Median, fl.Baton.Median/f.Baton.Median, (b.Median-r.Median-fl.Baton.Median)/f.Baton.Median)
			}
		}
	case "serve-handoff/handoff p99 ms (gRPC)", "serve-handoff/handoff p99 ms (HTTP/JSON)":
		target = "service ≤ 2 × library; raw column: two library contenders, each on a client and session of its own"
		ok = b.Median <= 2*r.Median
		if fl := find(rep, m.Workload, "floor "+m.Metric); fl != nil {
			target += fmt.Sprintf(" (the protocol's floor, floorHold's lock in memory: %.3g ms)", fl.Baton.Median)
		}
	case "serve-held/heap bytes/hold":
		heap := "the server's child process's live heap after GC"
		if len(cfg.ServeCommand) == 0 {
			heap = "this process's live heap after GC, the callers' included"
		}
		target = fmt.Sprintf("service ≤ 8 KiB per open Hold stream in every run (%s, %d streams over gRPC); raw column: the library's per held lock", heap, cfg.ServeHolds)
		ok = b.Max <= 8192
		// The floor: the same HTTP/2 server stream and generated handler
		// with no hold behind it (floorHold), in the same run.
		if f := find(rep, m.Workload, "floor heap bytes/hold"); f != nil {
			target += fmt.Sprintf(" (the floor, the same stream of connect and net/http on floorHold, a lock in memory: %.0f B; the service's own: %.0f B)", f.Baton.Median, b.Median-f.Baton.Median)
		}
	default:
		return
	}
	if m.Starved > 0 && timing(m.Metric) {
		// Not judged: a starved run's time is the machine's.
		m.Target = fmt.Sprintf("%s — not judged (starved: %d of %d runs)", target, m.Starved, m.Runs)
		return
	}
	m.Target, m.Met = target, &ok
}

func find(rep *Report, workload, metric string) *Measure {
	for i := range rep.Measures {
		if rep.Measures[i].Workload == workload && rep.Measures[i].Metric == metric {
			return &rep.Measures[i]
		}
	}
	return nil
}
