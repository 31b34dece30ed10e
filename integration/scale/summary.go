package scale

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/batonhq/baton/integration/harness"
)

// Summary is what the summary line says, from each phase that ran; a
// phase that did not run has its results nil (or Ran false).
type Summary struct {
	// Held, HeldSmall and Waiters are the sizes asked for.
	Held, HeldSmall, Waiters int
	Floor                    Floor           `json:"fdatasync"`
	HeldResult               *HeldResult     `json:"-"`
	WaitersResults           []WaitersResult `json:"-"`
	Server                   *ServerCost     `json:"-"`
	// Storm and Processes are filled by those phases.
	StormRan, StormOK bool
	StormSeconds      float64
	ProcessesRan      bool
	ProcessesOK       bool
	Processes         int
	ProcessLocks      int
	// FleetRan and Fleet are the fleet phase's.
	FleetRan bool
	Fleet    *FleetResult `json:"-"`
	// Failures are the checks that failed, each a line.
	Failures []string
}

// Floor is the disk's: p50 and p99 of a 4 KiB write and fdatasync in the
// member's data directory.
type Floor = harness.Floor

// Waiter returns the baton waiters run of n waiters, if any.
func (s Summary) Waiter(impl string, n int) (WaitersResult, bool) {
	for _, r := range s.WaitersResults {
		if r.Impl == impl && r.Waiters == n {
			return r, true
		}
	}
	return WaitersResult{}, false
}

// OK says every check of the phases that ran passed: the waiters' order
// and cleanup, the server's one watcher per held key on one stream per
// session, the storm's and the processes' own verdicts.
func (s Summary) OK() bool { return len(s.Problems()) == 0 }

// Problems lists the failed checks.
func (s Summary) Problems() []string {
	out := append([]string(nil), s.Failures...)
	for _, r := range s.WaitersResults {
		if !r.OK() {
			out = append(out, fmt.Sprintf("waiters %d (%s): %d out of order, %d double holders, %d keys and %.0f watchers left",
				r.Waiters, r.Impl, r.OutOfOrder, r.DoubleHolders, r.KeysLeft, r.WatchersLeft))
		}
	}
	if c := s.Server; c != nil {
		if c.HeldWatchers > float64(c.Locks) || c.HeldGrowth.WatchStreams > float64(c.Sessions) {
			out = append(out, fmt.Sprintf("server: %.0f watchers on %.0f watch streams for %d held locks on %d sessions, want at most one per lock on one stream per session", c.HeldWatchers, c.HeldGrowth.WatchStreams, c.Locks, c.Sessions))
		}
		if c.KeysLeft > 0 || c.WatchersLeft > 0 {
			out = append(out, fmt.Sprintf("server: %d keys and %.0f watchers left after Close", c.KeysLeft, c.WatchersLeft))
		}
	}
	if s.StormRan && !s.StormOK {
		out = append(out, "storm: not ok")
	}
	if s.ProcessesRan && !s.ProcessesOK {
		out = append(out, "processes: not ok")
	}
	return out
}

// Summarize is the one summary line:
//
//	scale: held 100000 heap <B> B/lock goroutines/lock <G> keepalives/ttl <K1>@1000 <K2>@100000 acquire <R>x raw; waiters 10000 requests/handoff <Q> events/handoff <E> p99 <P>x; storm ok <S>s; processes 50x2000 ok; fleet events/acquisition 50 sessions <F1> (raw <R1>) 500 sessions <F2> (raw <R2>)
//
// with "skipped" for a phase that did not run.
func Summarize(s Summary) string {
	var parts []string
	if h := s.HeldResult; h != nil {
		parts = append(parts, fmt.Sprintf("held %d heap %.0f B/lock goroutines/lock %s keepalives/ttl %s@%d %s@%d acquire %.2fx raw",
			h.Locks, h.HeapPerLock.Median, num(h.GoroutinesPerLock), num(h.KeepAlivesPerTTLSmall.Median), h.Small, num(h.KeepAlivesPerTTL.Median), h.Locks, h.AcquireRatio))
	} else {
		parts = append(parts, fmt.Sprintf("held %d skipped", s.Held))
	}
	big, okBig := s.Waiter("baton", s.Waiters)
	base, okBase := s.Waiter("baton", 8)
	if okBig {
		ratio := "-"
		if okBase && base.HandoffP99 > 0 {
			ratio = fmt.Sprintf("%.2f", float64(big.HandoffP99)/float64(base.HandoffP99))
		}
		parts = append(parts, fmt.Sprintf("waiters %d requests/handoff %.2f events/handoff %.2f p99 %sx", big.Waiters, big.RequestsPerHandoff, big.EventsPerHandoff, ratio))
	} else {
		parts = append(parts, fmt.Sprintf("waiters %d skipped", s.Waiters))
	}
	if s.StormRan {
		parts = append(parts, fmt.Sprintf("storm %s %.1fs", verdict(s.StormOK), s.StormSeconds))
	} else {
		parts = append(parts, "storm skipped")
	}
	if s.ProcessesRan {
		parts = append(parts, fmt.Sprintf("processes %dx%d %s", s.Processes, s.ProcessLocks, verdict(s.ProcessesOK)))
	} else {
		parts = append(parts, "processes skipped")
	}
	if f := s.Fleet; f != nil {
		var fp []string
		for _, r := range f.Runs {
			if r.Impl != "baton" {
				continue
			}
			raw := "-"
			if q, ok := f.Run("raw", r.Sessions); ok {
				raw = fmt.Sprintf("%.2f", q.EventsPerAcquisition)
			}
			fp = append(fp, fmt.Sprintf("%d sessions %.2f (raw %s)", r.Processes*r.Sessions, r.EventsPerAcquisition, raw))
		}
		parts = append(parts, "fleet events/acquisition "+strings.Join(fp, " "))
	} else {
		parts = append(parts, "fleet skipped")
	}
	return "scale: " + strings.Join(parts, "; ")
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// num prints a figure with at most four decimals, trailing zeros dropped.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 4, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		return "0"
	}
	return s
}

// CPUs is the number of CPUs this process may use.
func CPUs() int { return runtime.NumCPU() }

// OpenFileLimit is the soft RLIMIT_NOFILE, if known.
func OpenFileLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, false
	}
	return uint64(r.Cur), true
}

// MemAvailable is /proc/meminfo's MemAvailable in bytes, if known.
func MemAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
