package election

import (
	"cmp"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/config"
)

// Strategy is how an election picks its leader. Every candidate of one
// election must use the same one: a Campaign with another strategy than the
// candidates already there fails with an error wrapping ErrStrategy and
// ErrInvalid.
type Strategy uint8

const (
	// Oldest is the default: the candidate that campaigned first leads, as
	// with etcd's concurrency.Election and `etcdctl elect`, which
	// interoperate with it. Leadership moves only when the leader resigns,
	// transfers to the next candidate in the queue, or is lost.
	Oldest Strategy = iota
	// Preferred makes the best live candidate lead: the highest
	// WithPriority, then among equal priorities the lowest WithVersion
	// (while a rolling upgrade runs, the old version leads until no
	// candidate runs it; a candidate without a version ranks after every
	// versioned one), then the one that campaigned first. A candidate
	// better by priority or version than the leader asks it to end its
	// term (Term.EndRequested) and preempts it after its
	// WithHandoverDeadline. Resign and Transfer hand leadership over in one
	// transaction, with no moment without a leader.
	Preferred
)

var strategyNames = []string{"oldest", "preferred"}

// String is the strategy's name: "oldest" or "preferred".
func (s Strategy) String() string {
	if int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return "strategy(" + strconv.Itoa(int(s)) + ")"
}

func parseStrategy(s string) (Strategy, bool) {
	for i, n := range strategyNames {
		if n == s {
			return Strategy(i), true
		}
	}
	return 0, false
}

// WithStrategy sets how the election picks its leader (default Oldest).
func WithStrategy(s Strategy) Option { return config.Strategy(uint8(s), strategyNames) }

// WithPriority sets the candidate's priority (default 0): under Preferred
// a higher one leads. Every observer sees it (Candidates, `baton
// candidates`); it is not part of the campaign value.
func WithPriority(p int) Option { return config.Priority(p) }

// WithVersion sets the candidate's version, 1 to 64 bytes of letters,
// digits, '.', '_', '+' and '-' ("v1.2.3"). Versions compare as dotted
// numbers where both parts are numeric ("v1.10" is newer than "v1.9"),
// else as text. Under Preferred the lowest version leads among equal
// priorities.
func WithVersion(v string) Option { return config.Version(v) }

// WithHandoverDeadline bounds how long a leader asked to end its term by
// this candidate (a better one, under Preferred) has to hand over before
// this candidate preempts it: at least 100 ms, at most 5 minutes, default
// 10 s. It is measured on this candidate's clock from the moment its
// request was written or first seen.
func WithHandoverDeadline(d time.Duration) Option { return config.Deadline(d) }

// rank is what Preferred orders candidates by.
type rank struct {
	priority int
	version  string
	age      int64 // the record's CreateRevision: lower is older
}

// outranks reports whether a is better than b by priority or version,
// the two that justify asking a leader to end its term.
func outranks(a, b rank) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return compareVersions(a.version, b.version) < 0
}

// compareRanks orders the best first.
func compareRanks(a, b rank) int {
	switch {
	case outranks(a, b):
		return -1
	case outranks(b, a):
		return 1
	}
	return cmp.Compare(a.age, b.age)
}

// compareVersions compares dotted versions, numeric parts as numbers; ""
// is after every version.
func compareVersions(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	split := func(v string) []string {
		return strings.FieldsFunc(strings.TrimPrefix(strings.TrimPrefix(v, "v"), "V"), func(r rune) bool {
			return r == '.' || r == '-' || r == '+' || r == '_'
		})
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.ParseUint(pa[i], 10, 64)
		nb, eb := strconv.ParseUint(pb[i], 10, 64)
		c := 0
		if ea == nil && eb == nil {
			c = cmp.Compare(na, nb)
		} else {
			c = strings.Compare(pa[i], pb[i])
		}
		if c != 0 {
			return c
		}
	}
	if c := cmp.Compare(len(pa), len(pb)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}
