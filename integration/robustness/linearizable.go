package robustness

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/batonhq/baton/fencing"
)

// The fenced register: a write is admitted when its token is at least the
// highest admitted so far, rejected as stale when lower, and has no
// effect when rejected because its holder no longer held (the guard's
// transaction compares ownership too). A read returns the last admitted
// value. A failed write may or may not have taken effect.
type regState struct {
	highest int64
	value   string
}

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in := state.(regState), input.(RegOp)
		if in.Read {
			if output.(RegOp).Value == s.value {
				return []any{s}
			}
			return nil
		}
		admits := in.Token >= s.highest
		next := regState{highest: in.Token, value: in.Value}
		switch out := output.(RegOp); {
		case out.Outcome == "unknown" && admits:
			return []any{s, next}
		case out.Outcome == "unknown", out.Outcome == "lost":
			return []any{s}
		case out.Outcome == "accepted" && admits:
			return []any{next}
		case out.Outcome == "stale" && !admits:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: describeRegOp,
}

// The in-memory guard alone: admit iff at least the highest admitted.
var guardModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		highest, in, out := state.(int64), input.(RegOp), output.(RegOp)
		switch {
		case out.Outcome == "unknown":
			return true, max(highest, in.Token) // or not: never returned here
		case out.Outcome == "accepted":
			return in.Token >= highest, in.Token
		}
		return in.Token < highest, highest
	},
	DescribeOperation: describeRegOp,
}

func describeRegOp(input, output any) string {
	in, out := input.(RegOp), output.(RegOp)
	if in.Read {
		return fmt.Sprintf("read() -> %q", out.Value)
	}
	return fmt.Sprintf("write(%d, %q) -> %s", in.Token, in.Value, out.Outcome)
}

func operations(ops []RegOp, resource string) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Resource != resource {
			continue
		}
		ret := o.Return
		if ret == 0 {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Call, Output: o, Return: ret})
	}
	return out
}

func resources(ops []RegOp) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range ops {
		if !seen[o.Resource] {
			seen[o.Resource] = true
			out = append(out, o.Resource)
		}
	}
	sort.Strings(out)
	return out
}

// checkRegisters checks each fenced register, and each resource of the
// in-memory guard, for linearizability.
func checkRegisters(h *History, rep *Report) {
	for _, res := range resources(h.Regs) {
		ops := operations(h.Regs, res)
		rep.Histories++
		result, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), ops, time.Minute)
		switch result {
		case porcupine.Illegal:
			rep.add("register", fmt.Sprintf("register %s: not linearizable (%d operations); %s", res, len(ops), longestPrefix(ops, info)), 0)
		case porcupine.Unknown:
			rep.Unknown = append(rep.Unknown, "register "+res)
		}
	}
	for _, res := range resources(h.Admits) {
		ops := operations(h.Admits, res)
		rep.Histories++
		switch porcupine.CheckOperationsTimeout(guardModel, ops, time.Minute) {
		case porcupine.Illegal:
			rep.add("guard", fmt.Sprintf("in-memory guard %s: admissions not linearizable (%d operations)", res, len(ops)), 0)
		case porcupine.Unknown:
			rep.Unknown = append(rep.Unknown, "guard "+res)
		}
	}
}

// longestPrefix describes where the longest linearizable prefix stops.
func longestPrefix(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	best := []int(nil)
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	done := make(map[int]bool, len(best))
	for _, id := range best {
		done[id] = true
	}
	// The first operation, in call order, that no linearization reached.
	first := -1
	for i := range ops {
		if !done[i] && (first < 0 || ops[i].Call < ops[first].Call) {
			first = i
		}
	}
	if first < 0 {
		return fmt.Sprintf("%d operations linearized", len(best))
	}
	o := ops[first].Input.(RegOp)
	return fmt.Sprintf("%d of %d linearized; stuck at %s by client %d", len(best), len(ops), describeRegOp(o, o), o.Client)
}

// checkFences checks the etcd guard's own marks in etcd's history: the
// highest admitted token of a resource never goes down.
func checkFences(h *History, rep *Report) {
	for _, n := range h.Names {
		if n.Fence == "" {
			continue
		}
		rep.Histories++
		var highest int64
		for _, e := range h.Events {
			if e.Key != n.Fence || e.Delete {
				continue
			}
			t, err := fencing.ParseToken(e.Value)
			if err != nil {
				if v, perr := strconv.ParseInt(e.Value, 10, 64); perr == nil {
					t = fencing.Token(v)
				} else {
					rep.add("fence", fmt.Sprintf("fence %s at rev %d holds %q, not a token", n.Fence, e.Rev, e.Value), e.Rev)
					continue
				}
			}
			if int64(t) < highest {
				rep.add("fence", fmt.Sprintf("fence %s went down at rev %d: %d after %d (a stale token admitted)", n.Fence, e.Rev, t, highest), e.Rev)
			}
			highest = max(highest, int64(t))
		}
	}
}
