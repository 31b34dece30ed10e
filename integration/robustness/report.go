package robustness

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// Report is what a run found.
type Report struct {
	Seed uint64
	// Operations by kind, split by success.
	Ops, Failed map[string]int
	// Faults by kind, and their timeline.
	Faults   map[string]int
	Timeline []string
	// Histories is the number of histories checked (one per name and
	// check, per Observe stream, per register); Writes the fenced writes
	// judged; Converge the convergence checks of Observe streams.
	Histories, Writes, Converge int
	// Knows counts handovers by the fault kinds active then and outcome:
	// "told first", "told late", "not promised", "not observed".
	Knows map[string]map[string]int
	// Free counts the grants the free-lock check judged, by outcome;
	// FreeLatency describes their grant-to-return times.
	Free map[string]int
	// Traffic counts the runs of each traffic kind beside the lanes.
	Traffic, TrafficTook map[string]int
	// Disturbed counts the disturbances, DisturbedFor their time; of
	// them, LoadDisturbed were symptoms of load alone (Disturbance.Load).
	Disturbed, LoadDisturbed       int
	DisturbedFor, LoadDisturbedFor time.Duration
	FreeLatency                    string
	// FreeBound says the free-lock check's bound and how it was set.
	FreeBound string
	// Oracles counts what each judging check judged.
	Oracles map[string]int
	// Starvation is what the run's meter saw of this process's
	// scheduling (harness.Meter); LoadBefore and LoadAfter the machine's
	// load averages at the start and the end.
	Starvation            harness.Starvation
	LoadBefore, LoadAfter string
	// Uncovered are the traffic kinds a starved run did not reach (no
	// acquisition): not judged, and said in the last line.
	Uncovered []string
	// Labels sums up each process's metric samples; LabelLimit is their
	// Registerers' label limit.
	Labels     []string
	LabelLimit int
	// Unknown lists linearizability checks that timed out.
	Unknown    []string
	Violations []Violation

	start int64
}

// Violation is one broken rule, with the history around it.
type Violation struct {
	Check   string
	Msg     string
	Rev     int64
	Excerpt []string
	// At is how far into the run the revision was seen; zero if unknown.
	At time.Duration
}

func newReport(h *History) *Report {
	return &Report{Ops: map[string]int{}, Failed: map[string]int{}, Faults: map[string]int{},
		Knows: map[string]map[string]int{}, Free: map[string]int{}, Traffic: map[string]int{}, TrafficTook: map[string]int{}, Oracles: map[string]int{}, start: h.Start}
}

func (r *Report) add(check, msg string, rev int64) {
	r.Violations = append(r.Violations, Violation{Check: check, Msg: msg, Rev: rev})
}

// covered counts the runs of each traffic kind and reports a kind that
// never ran, or ran without one successful acquisition, as a violation:
// a run that did not reach a mechanism proves nothing about it.
func (r *Report) covered(h *History, kinds []string) {
	r.Histories++
	for _, t := range h.Traffic {
		r.Traffic[t.Kind]++
	}
	took := map[string]int{}
	for _, o := range h.Ops {
		kind, _, _ := strings.Cut(o.Client, ".")
		if o.Err == "" && isAcquisition(o.Kind) {
			took[kind]++
		}
	}
	for _, k := range kinds {
		r.TrafficTook[k] = took[k]
		miss := ""
		switch {
		case r.Traffic[k] == 0:
			miss = fmt.Sprintf("traffic kind %s never ran", k)
		case took[k] == 0:
			miss = fmt.Sprintf("traffic kind %s ran %d times without one acquisition", k, r.Traffic[k])
		}
		switch {
		case miss == "":
		case r.Starved():
			// A starved run's acquisitions time out: it says what it did
			// not reach, and is no proof about it.
			r.Uncovered = append(r.Uncovered, k)
		default:
			r.add("coverage", miss, 0)
		}
	}
}

// isAcquisition: a call that takes a lock or a term, or forces one.
func isAcquisition(kind string) bool {
	for _, s := range []string{"Lock", "Campaign", "Acquire", ".force", "shard.Own"} {
		if strings.Contains(kind, s) {
			return true
		}
	}
	return false
}

func (r *Report) free(outcome string) { r.Free[outcome]++ }

// judged counts one judgement of a check.
func (r *Report) judged(check string) { r.Oracles[check]++ }

func (r *Report) knows(kind, outcome string) {
	if r.Knows[kind] == nil {
		r.Knows[kind] = map[string]int{}
	}
	r.Knows[kind][outcome]++
}

// Operations is the total number of operations.
func (r *Report) Operations() int {
	n := 0
	for _, c := range r.Ops {
		n += c
	}
	for _, c := range r.Failed {
		n += c
	}
	return n
}

// FaultCount is the total number of faults.
func (r *Report) FaultCount() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

// finish counts operations and faults and cuts an excerpt of the history
// around each violation.
func (r *Report) finish(h *History) {
	for _, o := range h.Ops {
		if o.Err == "" {
			r.Ops[o.Kind]++
		} else {
			r.Failed[o.Kind]++
		}
	}
	for _, a := range h.Admits {
		if a.Outcome == "accepted" {
			r.Ops["fencing.MemoryGuard.Admit"]++
		} else {
			r.Failed["fencing.MemoryGuard.Admit"]++
		}
	}
	for _, d := range h.Disturbances {
		r.Disturbed++
		r.DisturbedFor += time.Duration(d.End - d.Start)
		if d.Load {
			r.LoadDisturbed++
			r.LoadDisturbedFor += time.Duration(d.End - d.Start)
		}
	}
	faults := append([]Fault(nil), h.Faults...)
	sort.Slice(faults, func(i, j int) bool { return faults[i].Start < faults[j].Start })
	for _, f := range faults {
		r.Faults[f.Kind]++
		r.Timeline = append(r.Timeline, fmt.Sprintf("%9s..%-9s %-15s %s", since(h.Start, f.Start), since(h.Start, f.End), f.Kind, f.Detail))
	}
	r.Labels, r.LabelLimit = labelFigures(h), h.MetricLabelLimit
	for i := range r.Violations {
		v := &r.Violations[i]
		if len(v.Excerpt) == 0 {
			v.Excerpt = excerpt(h, v.Rev)
		}
		if t, ok := h.seenAt(v.Rev); ok && v.Rev > 0 {
			v.At = time.Duration(t - h.Start)
		}
	}
}

// excerpt is the history around rev: etcd's events of the revisions just
// before it, the calls in flight when it was seen, the faults around it.
func excerpt(h *History, rev int64) []string {
	if rev <= 0 {
		return nil
	}
	var out []string
	for _, e := range h.Events {
		if e.Rev < rev-6 || e.Rev > rev+1 || strings.HasPrefix(e.Key, "/robustness/healthy") {
			continue
		}
		what := "put"
		if e.Delete {
			what = "delete"
		}
		at := ""
		if t, ok := h.seenAt(e.Rev); ok {
			at = since(h.Start, t)
		}
		out = append(out, fmt.Sprintf("  etcd rev %d (%s): %s %s token %d value %q", e.Rev, at, what, e.Key, e.Create, trim(e.Value)))
	}
	t, ok := h.seenAt(rev)
	if !ok {
		return out
	}
	const window = int64(500e6)
	n := 0
	for _, o := range h.Ops {
		ret := o.Return
		if ret == 0 {
			ret = 1<<63 - 1
		}
		if o.Call > t+window || ret < t-window || n >= 25 {
			continue
		}
		n++
		res := "ok"
		if o.Err != "" {
			res = "error: " + trim(o.Err)
		}
		ends := "never returned"
		if o.Return != 0 {
			ends = since(h.Start, o.Return)
		}
		out = append(out, fmt.Sprintf("  call %s..%s %s %s %s key %s token %d: %s", since(h.Start, o.Call), ends, o.Client, o.Kind, o.Name, shortKey(o.Key), o.Token, res))
	}
	for _, x := range h.Holds {
		if x.Ended != 0 && x.Ended > t-window && x.Ended < t+window {
			out = append(out, fmt.Sprintf("  context of %s's %s %s (token %d) ended at %s: %s", x.Client, x.Prim, x.Name, x.Token, since(h.Start, x.Ended), trim(x.Cause)))
		}
	}
	for _, f := range h.Faults {
		if f.Start <= t+window && (f.End == 0 || f.End >= t-int64(10e9)) {
			out = append(out, fmt.Sprintf("  fault %s..%s %s %s", since(h.Start, f.Start), since(h.Start, f.End), f.Kind, f.Detail))
		}
	}
	return out
}

func trim(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// FirstFound is how far into the run the earliest violation with a known
// time happened; zero if none.
func (r *Report) FirstFound() time.Duration {
	first, _ := r.firstViolation()
	return first
}

// firstViolation is FirstFound and the check that reported it.
func (r *Report) firstViolation() (time.Duration, string) {
	var first time.Duration
	check := ""
	for _, v := range r.Violations {
		if v.At > 0 && (first == 0 || v.At < first) {
			first, check = v.At, v.Check
		}
	}
	return first, check
}

// StarvedIf is when a run counts as starved: this process lost more than
// a tenth of its time to stalls, or stood still for a second at once.
// What such a run timed (its operations, the free-lock latencies) says
// how loaded the machine was, not how fast baton is; the checks that
// judge by time say what they did not judge.
var StarvedIf = harness.StarvedIf{Share: 0.10, Max: time.Second}

// Starved reports whether the run was starved (StarvedIf).
func (r *Report) Starved() bool { return r.Starvation.Starved(StarvedIf) }

// Summary is the report's last line; a starved run says so at its end.
func (r *Report) Summary() string {
	s := fmt.Sprintf("robustness: %d operations, %d faults (%d kinds), %d histories checked, %d violations, seed %d",
		r.Operations(), r.FaultCount(), len(r.Faults), r.Histories, len(r.Violations), r.Seed)
	if r.Starved() {
		s += fmt.Sprintf(", STARVED (%.0f%% of the run lost to stalls, the longest %v: its timings are not results",
			100*r.Starvation.Share(), r.Starvation.Max.Round(time.Millisecond))
		if len(r.Uncovered) > 0 {
			s += "; not reached: " + strings.Join(r.Uncovered, ", ")
		}
		s += ")"
	}
	return s
}

// Print writes the report; its last line is Summary.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\noperations by kind (ok / failed):\n")
	kinds := map[string]bool{}
	for k := range r.Ops {
		kinds[k] = true
	}
	for k := range r.Failed {
		kinds[k] = true
	}
	for _, k := range sorted(kinds) {
		fmt.Fprintf(w, "  %-28s %7d / %d\n", k, r.Ops[k], r.Failed[k])
	}
	fmt.Fprintf(w, "traffic kinds (runs, acquisitions):\n")
	for _, k := range sortedKeys(r.Traffic) {
		fmt.Fprintf(w, "  %-28s %7d %7d\n", k, r.Traffic[k], r.TrafficTook[k])
	}
	fmt.Fprintf(w, "faults by kind:\n")
	for _, k := range sortedKeys(r.Faults) {
		fmt.Fprintf(w, "  %-28s %7d\n", k, r.Faults[k])
	}
	fmt.Fprintf(w, "fault timeline:\n")
	for _, l := range r.Timeline {
		fmt.Fprintf(w, "  %s\n", l)
	}
	starved := ""
	if r.Starved() {
		starved = " — STARVED"
	}
	fmt.Fprintf(w, "this process's scheduling (a %v sleep, again and again): %s; load %s → %s%s\n",
		harness.MeterPeriod, r.Starvation, r.LoadBefore, r.LoadAfter, starved)
	if r.Disturbed > 0 {
		fmt.Fprintf(w, "disturbances (cluster or machine unhealthy, no fault): %d, %v in all; of them load alone (not excused by the free-lock check): %d, %v\n",
			r.Disturbed, r.DisturbedFor.Round(time.Millisecond), r.LoadDisturbed, r.LoadDisturbedFor.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "knows first (handovers by fault active then):\n")
	for _, k := range sortedKeys(r.Knows) {
		var parts []string
		for _, o := range sortedKeys(r.Knows[k]) {
			parts = append(parts, fmt.Sprintf("%s %d", o, r.Knows[k][o]))
		}
		fmt.Fprintf(w, "  %-28s %s\n", k, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "a free lock is taken (grants judged by outcome):\n")
	for _, k := range sortedKeys(r.Free) {
		fmt.Fprintf(w, "  %-28s %7d\n", k, r.Free[k])
	}
	if r.FreeBound != "" {
		fmt.Fprintf(w, "  %s\n", r.FreeBound)
	}
	if r.FreeLatency != "" && r.Starved() {
		fmt.Fprintf(w, "  %s — starved: not a result\n", r.FreeLatency)
	} else if r.FreeLatency != "" {
		fmt.Fprintf(w, "  %s\n", r.FreeLatency)
	}
	if len(r.Labels) > 0 {
		fmt.Fprintf(w, "metric labels, by process (limit %d):\n", r.LabelLimit)
		for _, l := range r.Labels {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "judgements by oracle:\n")
	for _, k := range sortedKeys(r.Oracles) {
		fmt.Fprintf(w, "  %-28s %7d\n", k, r.Oracles[k])
	}
	fmt.Fprintf(w, "checked: %d histories, %d fenced writes, %d Observe convergences\n", r.Histories, r.Writes, r.Converge)
	if len(r.Unknown) > 0 {
		fmt.Fprintf(w, "linearizability undecided (timed out): %v\n", r.Unknown)
	}
	for i, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATION %d [%s]: %s\n", i+1, v.Check, v.Msg)
		for _, l := range v.Excerpt {
			fmt.Fprintln(w, l)
		}
		if i == 19 && len(r.Violations) > 20 {
			fmt.Fprintf(w, "... and %d more violations\n", len(r.Violations)-20)
			break
		}
	}
	if len(r.Violations) > 0 {
		if first, check := r.firstViolation(); first > 0 {
			fmt.Fprintf(w, "first violation at %v into the run [%s]\n", first.Round(time.Millisecond), check)
		}
		fmt.Fprintf(w, "replay: make robustness ROBUSTNESS_SEED=%d\n", r.Seed)
	}
	fmt.Fprintln(w, r.Summary())
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CheckLeaks records the outcome of a check for goroutines left running
// after the run (goleak's), once everything is closed.
func (r *Report) CheckLeaks(err error) {
	r.Histories++
	if err != nil {
		r.add("goleak", err.Error(), 0)
	}
}
