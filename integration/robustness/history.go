package robustness

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/history"
)

// Op is one call and its return, on the shared clock. Return is zero when
// the call never returned (its process was killed or froze).
type Op struct {
	Client string // "w3" (in-process worker), "c1" (child), "o2" (observer)
	Kind   string // "mutex.Lock", "election.Proclaim", …
	Name   string // the primitive's name
	Call   int64
	Return int64
	Err    string // empty on success
	Key    string // the holder key the call acquired or released
	Token  int64
	// LeaseLeft is, for a release told its key was gone, the seconds its
	// key's lease had left once it answered; -1: the lease was gone; 0:
	// not asked.
	LeaseLeft int64 `json:",omitempty"`
}

// Fault is one injected fault, from its start to its end.
type Fault struct {
	Kind   string
	Detail string
	Start  int64
	End    int64
	// Revs are the revisions at which the fault itself deleted holder keys
	// (an admin delete or revoke): a holder cannot be told before those.
	Revs []int64
	// Keys are holder keys the fault deleted at revisions it did not
	// learn (an operator's CLI run), Tokens their holders' tokens, and
	// RevFrom and RevTo the revisions etcd was at before the fault began
	// and after it ended (0: not read). The deletion of a key's incarnation
	// Tokens name in (RevFrom, RevTo] counts as one of its Revs.
	Keys           []string `json:",omitempty"`
	Tokens         []int64  `json:",omitempty"`
	RevFrom, RevTo int64    `json:",omitempty"`
	// Clients are the clients a fault of their connections (or process)
	// hit, by name: w1, an observer o5, a traffic kind (set), a holder
	// process c0. Empty: the cluster's, or an operator's.
	Clients []string `json:",omitempty"`
}

// TrafficRun is one run of a traffic kind.
type TrafficRun struct {
	Kind       string
	Start, End int64
}

// Hold is one acquisition, from the handle's point of view.
type Hold struct {
	Prim   string // "mutex", "election", "rwmutex", "semaphore"
	Name   string
	Client string
	Key    string
	Token  int64
	Shared bool // a read lock or a semaphore permit
	// Acquired is when the acquiring call returned; Ended when the
	// handle's Context ended (zero if it never did); Cause is why.
	Acquired, Ended int64
	Cause           string
	// Child holds are in another process: their Context ends are not
	// observed.
	Child bool
	// Frozen holds were in a process stopped (SIGSTOP) while they held:
	// it could not be told anything; fencing alone protects its writes.
	Frozen bool
	// DeleteSeen is when the event log received the deletion of the
	// hold's key; Told whether the hold's Context had ended by then,
	// checked at that moment (in-process holds only): exact, where a
	// timestamp taken by a goroutine woken by the end would be late.
	DeleteSeen int64
	Told       bool
	// DeadOnReturn: the Context had already ended when the acquiring
	// call returned it (its key went meanwhile): the caller never
	// believed it held.
	DeadOnReturn bool
	// Foreign holds are etcd concurrency contenders': no Context ends
	// for them before a hand-over (not promised), but they must be
	// granted and exclude.
	Foreign bool `json:",omitempty"`
	// Untold lists the holds acquired in this process while this one's
	// Context had not ended (conflicting holds of the same name only).
	Untold []*Hold `json:"-"`

	done <-chan struct{}
	// validTo, when set, is the caller's own validity deadline on the
	// shared clock (a baton serve caller's: its heartbeat's send time plus
	// the validity the reply gave): from that moment the caller counts
	// itself told, whether or not its stream's lost has come.
	validTo *atomic.Int64
}

// over reports whether the hold had ended by at: its Context had, or its
// caller's validity deadline had passed.
func (x *Hold) over(at int64) bool {
	return closed(x.done) || (x.validTo != nil && at >= x.validTo.Load())
}

// ObsState is one state an Observe stream sent.
type ObsState struct {
	Stream     int
	Prim, Name string
	At         int64 // when it was received
	Rev        int64
	Key        string // the holder's key; empty for free / no leader
	Token      int64  // the holder key's CreateRevision
	Value      string // an election's value
}

// RegOp is one operation on a fenced register (the etcd guard's), or an
// admission by an in-memory guard (Read false, Value empty).
type RegOp struct {
	Resource string
	Client   int
	Read     bool
	Token    int64
	Value    string
	// Outcome of a write: "accepted", "stale" (rejected for its token),
	// "lost" (rejected: the holder no longer held), "unknown" (failed).
	Outcome      string
	Call, Return int64
}

// Observed is when the event watch delivered a revision.
type Observed struct {
	Rev int64
	At  int64
}

// History is everything a run recorded. Its methods are safe for
// concurrent use; the checks read it after the run.
type History struct {
	mu     sync.Mutex
	index  map[incarnation]*Hold     // in-process holds by key incarnation
	live   map[string]map[*Hold]bool // in-process holds not known ended, by name
	Start  int64
	Ops    []Op
	Faults []Fault
	Quiet  [][2]int64 // the fault loop's quiet whiles
	// Disturbances are the whiles the cluster or this machine was not
	// healthy (healthWatch).
	Disturbances []Disturbance
	// Traffic are the runs of the traffic kinds beside the lanes.
	Traffic []TrafficRun
	Holds   []*Hold
	States  []ObsState
	Regs    []RegOp
	Admits  []RegOp
	// Events is etcd's history of every key from revision 1; Seen is
	// when the watch delivered each revision.
	Events []history.Event
	Seen   []Observed
	// End is the revision of the marker that closed Events: everything
	// before it is in Events.
	End int64
	// StreamEnds is when each Observe stream ended; Settled is when the
	// traffic had stopped and the cluster was healthy again.
	StreamEnds map[int]int64
	Settled    int64
	// Names are the primitives' names and prefixes, with their rules.
	Names []NameInfo
	// Stalls are the whiles this process was not run (harness.Meter's, on
	// this clock), from Start to Settled; Probes the round trips of a
	// linearizable read through the cluster, every healthPeriod.
	Stalls []harness.Stall `json:",omitempty"`
	Probes []Probe         `json:",omitempty"`
	// ChildStalls are each holder process's own stalls, by client.
	ChildStalls map[string][]harness.Stall `json:",omitempty"`
	// Metrics are the samples of each process's Registerer, whose label
	// limit is MetricLabelLimit (labels.go).
	Metrics          []MetricSample
	MetricLabelLimit int
	// ExplicitLabels are the WithMetricLabel values the run gives: not
	// counted toward the limit.
	ExplicitLabels []string `json:",omitempty"`
}

// Probe is one round trip of the health watch's linearizable read: sent
// at At, answered RTT later (failed reads are not kept).
type Probe struct {
	At  int64
	RTT time.Duration
}

// NameInfo describes one primitive instance of the run.
type NameInfo struct {
	Prim, Name string
	Prefix     string // contender keys live under it
	Work       string // fenced evidence writes go to this key
	Limit      int    // semaphore limit; 1 for exclusive primitives
	Observed   bool   // has Observe streams
	Fence      string // the etcd guard's key for the name's register
	// Delay is the lock-delay every contender of the name uses (zero:
	// none); DelayPrefix where its records and markers live.
	Delay       time.Duration `json:",omitempty"`
	DelayPrefix string        `json:",omitempty"`
	// Private names are one traffic kind's: the lanes and holder
	// processes leave them alone.
	Private bool `json:",omitempty"`
	// Preferred: an election of the Preferred strategy.
	Preferred bool `json:",omitempty"`
}

func (h *History) op(o Op) {
	h.mu.Lock()
	h.Ops = append(h.Ops, o)
	h.mu.Unlock()
}

func (h *History) childStall(client string, s harness.Stall) {
	h.mu.Lock()
	if h.ChildStalls == nil {
		h.ChildStalls = make(map[string][]harness.Stall)
	}
	h.ChildStalls[client] = append(h.ChildStalls[client], s)
	h.mu.Unlock()
}

func (h *History) probe(p Probe) {
	h.mu.Lock()
	h.Probes = append(h.Probes, p)
	h.mu.Unlock()
}

func (h *History) disturbed(d Disturbance) {
	h.mu.Lock()
	h.Disturbances = append(h.Disturbances, d)
	h.mu.Unlock()
}

// traffic records one run of a traffic kind.
func (h *History) traffic(kind string, from, to int64) {
	h.mu.Lock()
	h.Traffic = append(h.Traffic, TrafficRun{Kind: kind, Start: from, End: to})
	h.mu.Unlock()
}

// quiet records a while the fault loop injected nothing.
func (h *History) quiet(from, to int64) {
	h.mu.Lock()
	h.Quiet = append(h.Quiet, [2]int64{from, to})
	h.mu.Unlock()
}

func (h *History) fault(f Fault) {
	h.mu.Lock()
	h.Faults = append(h.Faults, f)
	h.mu.Unlock()
}

func (h *History) hold(x *Hold) {
	h.mu.Lock()
	h.Holds = append(h.Holds, x)
	h.mu.Unlock()
}

// acquired records an in-process hold whose Context is done, first
// noting every live conflicting hold of the same name that has not been
// told yet: the next holder is already acting.
func (h *History) acquired(x *Hold, n NameInfo, done <-chan struct{}) {
	x.done = done
	x.DeadOnReturn = x.over(x.Acquired)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.index == nil {
		h.index = make(map[incarnation]*Hold)
		h.live = make(map[string]map[*Hold]bool)
	}
	h.Holds = append(h.Holds, x)
	h.index[incarnation{x.Key, x.Token}] = x
	k := x.Prim + "/" + x.Name
	if h.live[k] == nil {
		h.live[k] = make(map[*Hold]bool)
	}
	for p := range h.live[k] {
		if x.DeadOnReturn {
			break // it never held
		}
		if p.over(x.Acquired) {
			if closed(p.done) {
				delete(h.live[k], p)
			}
			continue
		}
		if !mayShare(n, p.Key, x.Key) && !(n.Prim == "semaphore") {
			p.Untold = append(p.Untold, x)
		}
	}
	h.live[k][x] = true
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// deleteSeen is the event log's report of a deleted key incarnation: if
// an in-process hold owned it, whether its Context had ended.
func (h *History) deleteSeen(key string, create, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.index[incarnation{key, create}]; x != nil && x.DeleteSeen == 0 {
		x.DeleteSeen, x.Told = at, x.over(at)
	}
}

// ended records the end of a hold's Context.
func (h *History) ended(x *Hold, at int64, cause string) {
	h.mu.Lock()
	x.Ended, x.Cause = at, cause
	h.mu.Unlock()
}

func (h *History) state(s ObsState) {
	h.mu.Lock()
	h.States = append(h.States, s)
	h.mu.Unlock()
}

func (h *History) reg(r RegOp) {
	h.mu.Lock()
	h.Regs = append(h.Regs, r)
	h.mu.Unlock()
}

func (h *History) metrics(s MetricSample) {
	h.mu.Lock()
	h.Metrics = append(h.Metrics, s)
	h.mu.Unlock()
}

func (h *History) admit(r RegOp) {
	h.mu.Lock()
	h.Admits = append(h.Admits, r)
	h.mu.Unlock()
}

// seenAt is when revision rev was first delivered by the event watch; ok
// is false when no watch delivered it.
func (h *History) seenAt(rev int64) (int64, bool) {
	i := sort.Search(len(h.Seen), func(i int) bool { return h.Seen[i].Rev >= rev })
	if i < len(h.Seen) && h.Seen[i].Rev == rev {
		return h.Seen[i].At, true
	}
	return 0, false
}

// activeFaults lists the kinds of fault in progress at t, or ended less
// than grace before it.
func (h *History) activeFaults(t, grace int64) []string {
	var out []string
	for _, f := range h.Faults {
		if f.Start <= t && (f.End == 0 || t <= f.End+grace) {
			out = append(out, f.Kind)
		}
	}
	sort.Strings(out)
	return dedup(out)
}

func dedup(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func (h *History) streamEnded(id int, at int64) {
	h.mu.Lock()
	if h.StreamEnds == nil {
		h.StreamEnds = make(map[int]int64)
	}
	h.StreamEnds[id] = at
	h.mu.Unlock()
}

// streamEnd is when stream id ended; the run's end if never recorded.
func (h *History) streamEnd(id int) int64 {
	if at, ok := h.StreamEnds[id]; ok {
		return at
	}
	return 1<<63 - 1
}

// save writes the history as JSON.
func (h *History) save(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
