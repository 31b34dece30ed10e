package dev

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// demoReport is everything the demo prints after its run; built from what
// the workers, the ledger and an etcd observer reported.
type demoReport struct {
	TTL      time.Duration
	Timeline []timelineEntry
	Ledger   []ledgerEntry
	Start    time.Time
	End      time.Time
	// Leaders as etcd saw them, in order.
	Leaders []leaderSpan
	Frozen  string // the worker stopped with SIGSTOP
	// Failover is from the SIGSTOP to the next worker leading; 0 if none.
	Failover  time.Duration
	NewLeader string
	Zombie    *ledgerEntry // the frozen worker's write after SIGCONT
	Problems  []string     // the scenario did not play out
}

type timelineEntry struct {
	At   time.Time
	Who  string
	What string
}

type leaderSpan struct {
	Worker string
	Token  int64
	From   time.Time
	To     time.Time // zero: still leading at the end
}

// check is one invariant's verdict.
type check struct {
	Name   string
	OK     bool
	Detail string
}

// checks verifies the invariants on the ledger and etcd's history,
// independently of the guard that enforced them.
func (r *demoReport) checks() []check {
	var out []check

	inOrder := check{Name: "accepted writes are in token order", OK: true}
	var last int64
	n := 0
	for _, e := range r.Ledger {
		if !e.Accepted {
			continue
		}
		n++
		if e.Token < last {
			inOrder.OK = false
			inOrder.Detail = fmt.Sprintf("record %d has token %d after token %d", e.Record, e.Token, last)
			break
		}
		last = e.Token
	}
	if inOrder.OK {
		inOrder.Detail = fmt.Sprintf("%d records", n)
	}
	out = append(out, inOrder)

	// Replay the ledger: a write is stale when its token is below the
	// highest admitted before it.
	noStale := check{Name: "no write was accepted from a stale token", OK: true}
	var highest int64
	stale := 0
	for _, e := range r.Ledger {
		switch {
		case e.Token < highest && e.Accepted:
			noStale.OK = false
			noStale.Detail = fmt.Sprintf("record %d from %s has token %d below %d", e.Record, e.Worker, e.Token, highest)
		case e.Token < highest:
			stale++
		case !e.Accepted:
			noStale.OK = false
			noStale.Detail = fmt.Sprintf("a current write from %s (token %d, highest %d) was rejected", e.Worker, e.Token, highest)
		default:
			highest = e.Token
		}
	}
	if noStale.OK {
		noStale.Detail = fmt.Sprintf("%d stale write(s), all rejected", stale)
	}
	out = append(out, noStale)

	rising := check{Name: "each new leader's token is higher than the last", OK: true}
	var tokens []string
	for i, l := range r.Leaders {
		tokens = append(tokens, fmt.Sprint(l.Token))
		if i > 0 && l.Token <= r.Leaders[i-1].Token {
			rising.OK = false
		}
	}
	rising.Detail = strings.Join(tokens, " < ")
	if !rising.OK {
		rising.Detail = "tokens " + strings.Join(tokens, ", ")
	}
	out = append(out, rising)

	zombie := check{Name: "the frozen leader's late write was rejected as stale"}
	switch {
	case r.Zombie == nil:
		zombie.Detail = "no late write was seen"
	case r.Zombie.Accepted:
		zombie.Detail = fmt.Sprintf("accepted as record %d", r.Zombie.Record)
	default:
		zombie.OK = true
		zombie.Detail = fmt.Sprintf("token %d < highest %d", r.Zombie.Token, r.Zombie.Highest)
	}
	out = append(out, zombie)

	for _, p := range r.Problems {
		out = append(out, check{Name: "the scenario played out", Detail: p})
	}
	return out
}

// passed reports whether every check holds.
func passed(cs []check) bool {
	for _, c := range cs {
		if !c.OK {
			return false
		}
	}
	return true
}

func (r *demoReport) at(t time.Time) string {
	return fmt.Sprintf("+%6.3fs", t.Sub(r.Start).Seconds())
}

// write prints the timeline, the leaders, a summary and the checks.
func (r *demoReport) write(w io.Writer) {
	fmt.Fprintln(w, "Timeline")
	for _, e := range r.Timeline {
		fmt.Fprintf(w, "  %s  %-7s %s\n", r.at(e.At), e.Who, e.What)
	}

	fmt.Fprintln(w, "\nLeaders, as etcd saw them")
	for _, l := range r.Leaders {
		to := "end"
		if !l.To.IsZero() {
			to = r.at(l.To)
		}
		records := 0
		for _, e := range r.Ledger {
			if e.Accepted && e.Token == l.Token {
				records++
			}
		}
		note := ""
		if l.Worker == r.Frozen {
			note = "  (frozen by SIGSTOP while leading)"
		}
		fmt.Fprintf(w, "  %-4s token %-4d %s -> %-9s %3d records%s\n", l.Worker, l.Token, r.at(l.From), to, records, note)
	}

	accepted, rejected := 0, 0
	for _, e := range r.Ledger {
		if e.Accepted {
			accepted++
		} else {
			rejected++
		}
	}
	fmt.Fprintln(w, "\nSummary")
	if r.Failover > 0 {
		fmt.Fprintf(w, "  failover:  %s led %.2fs after %s was frozen (lease TTL %v)\n",
			r.NewLeader, r.Failover.Seconds(), r.Frozen, r.TTL)
	} else {
		fmt.Fprintf(w, "  failover:  none seen\n")
	}
	fmt.Fprintf(w, "  writes:    %d accepted, %d rejected as stale\n", accepted, rejected)
	if z := r.Zombie; z != nil {
		verdict := "REJECTED"
		if z.Accepted {
			verdict = "ACCEPTED"
		}
		fmt.Fprintf(w, "  zombie:    %s woke up and wrote with token %d; the ledger had seen %d: %s\n",
			z.Worker, z.Token, z.Highest, verdict)
	}
	fmt.Fprintf(w, "  duration:  %.1fs\n", r.End.Sub(r.Start).Seconds())

	cs := r.checks()
	fmt.Fprintln(w, "\nInvariants")
	for _, c := range cs {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %s (%s)\n", mark, c.Name, c.Detail)
	}
	if passed(cs) {
		fmt.Fprintln(w, "\nAll invariants hold: the paused leader came back and fencing stopped it.")
	} else {
		fmt.Fprintln(w, "\nAn invariant broke: see FAIL above.")
	}
}

// ledgerTimeline folds runs of accepted writes from one term into one line.
func ledgerTimeline(entries []ledgerEntry) []timelineEntry {
	var out []timelineEntry
	for i := 0; i < len(entries); {
		e := entries[i]
		if !e.Accepted {
			out = append(out, timelineEntry{At: e.At, Who: "ledger",
				What: fmt.Sprintf("REJECTED write %d from %s: token %d is stale, the ledger has seen %d", e.Seq, e.Worker, e.Token, e.Highest)})
			i++
			continue
		}
		j := i
		for j+1 < len(entries) && entries[j+1].Accepted && entries[j+1].Worker == e.Worker && entries[j+1].Token == e.Token {
			j++
		}
		what := fmt.Sprintf("accepted record %d from %s (token %d)", e.Record, e.Worker, e.Token)
		if j > i {
			what = fmt.Sprintf("accepted records %d-%d from %s (token %d)", e.Record, entries[j].Record, e.Worker, e.Token)
		}
		out = append(out, timelineEntry{At: e.At, Who: "ledger", What: what})
		i = j + 1
	}
	return out
}
