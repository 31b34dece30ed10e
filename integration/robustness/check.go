package robustness

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/history"
	"github.com/batonhq/baton/rwmutex"
)

// isContender reports whether key is a contender key of n: everything
// under its prefix (a semaphore's limit key sits beside it).
func isContender(n NameInfo, key string) bool { return strings.HasPrefix(key, n.Prefix) }

// rule is the primitive's rule of who may hold together.
func rule(n NameInfo) history.Rule {
	switch n.Prim {
	case "semaphore":
		return history.Semaphore{Limit: n.Limit}
	case "rwmutex":
		return history.RWMutex{IsReader: rwmutex.IsReader}
	}
	return history.Semaphore{Limit: 1}
}

// mayShare reports whether a handover from key a to key b needs no
// telling: two readers.
func mayShare(n NameInfo, a, b string) bool {
	// A permit whose release let the next in must know first too: else
	// limit+1 act together.
	return n.Prim == "rwmutex" && rwmutex.IsReader(a) && rwmutex.IsReader(b)
}

// eventsOf are the events of n: its contenders and its fenced writes.
func eventsOf(h *History, n NameInfo) []history.Event {
	var out []history.Event
	for _, e := range h.Events {
		if isContender(n, e.Key) || e.Key == n.Work {
			out = append(out, e)
		}
	}
	return out
}

// check runs every check on a finished history.
func check(h *History, cfg Config) *Report {
	rep := newReport(h)
	checkEventLog(h, rep)
	for _, n := range h.Names {
		checkExclusion(h, n, rep)
		checkKnowsFirst(h, n, cfg, rep)
		if n.Observed {
			checkObserve(h, n, rep)
		}
	}
	checkFreeLock(h, cfg, rep)
	checkGranted(h, rep)
	checkLockDelay(h, rep)
	checkDrained(h, rep)
	checkOwned(h, rep)
	checkFrozenFenced(h, rep)
	checkRequestDelivered(h, rep)
	checkSharedKeys(h, rep)
	checkDistinctTokens(h, rep)
	checkGivenUp(h, cfg, rep)
	checkToldTruly(h, cfg, rep)
	checkRegisters(h, rep)
	checkFences(h, rep)
	checkMetricLabels(h, rep)
	rep.finish(h)
	return rep
}

// checkEventLog checks that the event log is whole: every revision from
// its first to the end marker delivered, in order.
func checkEventLog(h *History, rep *Report) {
	rep.Histories++
	var prev int64
	for _, e := range h.Events {
		switch {
		case e.Rev < prev:
			rep.add("event-log", fmt.Sprintf("watch went back in time: revision %d after %d", e.Rev, prev), e.Rev)
			return
		case prev != 0 && e.Rev > prev+1:
			rep.add("event-log", fmt.Sprintf("watch skipped revisions %d to %d", prev+1, e.Rev-1), e.Rev)
			return
		}
		prev = e.Rev
	}
	if h.End != 0 && prev != 0 && prev != h.End-1 {
		rep.add("event-log", fmt.Sprintf("watch ended at revision %d, before the end marker %d", prev, h.End), prev)
	}
}

// checkExclusion replays n's history with its rule: every fenced write by
// a key allowed to hold then, and never more holders together than the
// rule allows, grants in token order.
func checkExclusion(h *History, n NameInfo, rep *Report) {
	rep.Histories++
	r := history.Check(eventsOf(h, n), n.Prefix, n.Work, rule(n))
	rep.Writes += r.Writes
	for _, v := range r.Violations {
		rep.add("exclusion", fmt.Sprintf("%s %s: %s", n.Prim, n.Name, v), revOf(v))
	}
}

// revOf reads the "rev N:" a history violation starts with.
func revOf(v string) int64 {
	var rev int64
	_, _ = fmt.Sscanf(v, "rev %d:", &rev)
	return rev
}

type grant struct {
	key    string
	create int64
	rev    int64
}

type incarnation struct {
	key    string
	create int64
}

// replay walks n's contender events with its rule, and returns the grants
// (a key allowed to hold, from the revision it became so) and each key
// incarnation's deletion revision.
func replay(events []history.Event, n NameInfo) (grants []grant, deleted map[incarnation]int64) {
	deleted = make(map[incarnation]int64)
	ru := rule(n)
	var live []history.Entry
	granted := make(map[incarnation]bool)
	// Grants are of whole revisions: a key that went in the revision that
	// let it first never held.
	grantAt := func(rev int64) {
		for i, e := range live {
			inc := incarnation{e.Key, e.Create}
			if !granted[inc] && ru.MayHold(live, i) {
				granted[inc] = true
				grants = append(grants, grant{key: e.Key, create: e.Create, rev: rev})
			}
		}
	}
	var changed int64 // the revision whose events changed live, not yet granted
	for _, ev := range events {
		if changed != 0 && ev.Rev != changed {
			grantAt(changed)
			changed = 0
		}
		if !isContender(n, ev.Key) {
			continue
		}
		idx := -1
		for i, e := range live {
			if e.Key == ev.Key {
				idx = i
			}
		}
		switch {
		case ev.Delete && idx >= 0:
			deleted[incarnation{ev.Key, live[idx].Create}] = ev.Rev
			live = append(live[:idx], live[idx+1:]...)
		case !ev.Delete && idx < 0:
			live = append(live, history.Entry{Key: ev.Key, Create: ev.Create})
			sort.Slice(live, func(a, b int) bool { return live[a].Create < live[b].Create })
		}
		changed = ev.Rev
	}
	if changed != 0 {
		grantAt(changed)
	}
	return grants, deleted
}

// checkKnowsFirst checks the promise that a holder's Context ends before
// the next holder's grant can be observed: for every grant made by the
// deletion of a conflicting holder's key, that holder's Context ended
// before the grant's revision was first seen (by the event log or by the
// new holder's acquiring call). A deletion by an operator, and a holder
// frozen by SIGSTOP, cannot be told first: they are counted, not judged.
func checkKnowsFirst(h *History, n NameInfo, cfg Config, rep *Report) {
	rep.Histories++
	grants, deleted := replay(h.Events, n)
	// One key incarnation can be returned twice: a Campaign taking its
	// session's key over, or a caller adopting its session's key.
	holds := make(map[incarnation][]*Hold)
	for _, x := range h.Holds {
		if x.Prim == n.Prim && x.Name == n.Name {
			inc := incarnation{x.Key, x.Token}
			holds[inc] = append(holds[inc], x)
		}
	}
	admin := adminRevs(h)
	preempted := preemptions(h, n)
	grantRev := make(map[incarnation]int64, len(grants))
	for _, g := range grants {
		grantRev[incarnation{g.key, g.create}] = g.rev
	}
	// Every in-process acquisition checked, when it returned, that no
	// conflicting holder of the name in this process was still untold.
	for _, p := range h.Holds {
		if p.Prim != n.Prim || p.Name != n.Name || len(p.Untold) == 0 || p.Foreign || admin[deleted[incarnation{p.Key, p.Token}]] || preempted[deleted[incarnation{p.Key, p.Token}]] {
			continue
		}
		for _, x := range p.Untold {
			if x.Key == p.Key && x.Token == p.Token {
				continue // checkSharedKeys's
			}
			if d, ok := deleted[incarnation{x.Key, x.Token}]; ok && x.Foreign && x.Token < p.Token && d <= grantRev[incarnation{p.Key, p.Token}] {
				// etcd's Campaign returns once the older keys are gone,
				// without reading its own: its key went before p was
				// granted, and it came back later. Not p's successor
				// (the grants below judge that); checkGranted judges
				// its key.
				rep.knows("etcd contender", "returned after its key went")
				continue
			}
			if d, ok := deleted[incarnation{x.Key, x.Token}]; ok && x.Foreign {
				if at, ok := h.seenAt(d); ok && at < x.Acquired {
					// Queued after p, its key went before it returned (its
					// lease expired meanwhile, on a starved machine): it
					// never led; not baton's.
					rep.knows("etcd contender", "returned after its key went")
					continue
				}
			}
			rep.add("knows-first", fmt.Sprintf("%s %s: %s acquired (token %d, %s) at %s while %s (token %d, %s) had not been told",
				n.Prim, n.Name, x.Client, x.Token, shortKey(x.Key), since(h.Start, x.Acquired), p.Client, p.Token, shortKey(p.Key)), x.Token)
		}
	}
	// Every deletion of an in-process holder's key, waiter or not, came
	// after its Context ended, unless an operator made it.
	for _, p := range h.Holds {
		if p.Prim != n.Prim || p.Name != n.Name || p.DeleteSeen == 0 || p.Told || p.Frozen || p.Foreign {
			continue
		}
		d := deleted[incarnation{p.Key, p.Token}]
		if admin[d] || preempted[d] {
			continue
		}
		rep.judged("knows-first")
		kinds := h.activeFaults(p.DeleteSeen, int64(cfg.TTL))
		rep.add("knows-first", fmt.Sprintf("%s %s: %s (token %d, %s) had not been told when its key's deletion (rev %d) was seen; faults %v",
			n.Prim, n.Name, p.Client, p.Token, shortKey(p.Key), d, kinds), d)
	}
	grace := int64(cfg.TTL)
	byRev := make(map[int64][]incarnation)
	for inc, d := range deleted {
		byRev[d] = append(byRev[d], inc)
	}
	for _, g := range grants {
		seen, ok := h.seenAt(g.rev)
		for _, next := range holds[incarnation{g.key, g.create}] {
			if !next.DeadOnReturn && (!ok || next.Acquired < seen) {
				seen, ok = next.Acquired, true
			}
		}
		if !ok {
			continue
		}
		for _, inc := range byRev[g.rev] {
			d := g.rev
			if mayShare(n, inc.key, g.key) {
				continue
			}
			for _, prev := range holds[inc] {
				kinds := h.activeFaults(seen, grace)
				if len(kinds) == 0 {
					kinds = []string{"none"}
				}
				switch {
				case admin[d]:
					rep.knows("operator", "not promised")
					continue
				case preempted[d]:
					rep.knows("preempted", "not promised")
					continue
				case prev.Foreign:
					rep.knows("etcd contender", "not promised")
					continue
				case prev.Frozen:
					rep.knows("frozen", "not promised")
					continue
				case prev.Child && prev.Ended == 0:
					rep.knows("cli", "not observed")
					continue
				}
				ok, why := toldFirst(prev, seen)
				if !ok && prev.Child && prev.Ended > seen && h.childStalled(prev.Client, seen-int64(time.Second), prev.Ended) >= time.Duration(prev.Ended-seen) {
					// The holder process stood still at least as long as its
					// clock reading is late: it cannot say when it was told.
					rep.knows(kinds[0], "not judged (starved)")
					continue
				}
				rep.judged("knows-first")
				for _, k := range kinds {
					if ok {
						rep.knows(k, "told first")
					} else {
						rep.knows(k, "told late")
					}
				}
				if !ok && (prev.Child || prev.DeleteSeen == 0) { // else reported below, grant or not
					rep.add("knows-first", fmt.Sprintf("%s %s: %s (token %d, %s) %s: the grant of %s (token %d) at rev %d; faults %v",
						n.Prim, n.Name, prev.Client, prev.Token, shortKey(prev.Key), why, shortKey(g.key), g.create, g.rev, kinds), g.rev)
				}
			}
		}
	}
}

// adminRevs are the revisions at which an operator's fault deleted keys:
// those it recorded, and the deletions of the key incarnations an
// operator's CLI run named, between the revisions read around it (not
// when they were heard: the event log may hear them long after).
func adminRevs(h *History) map[int64]bool {
	admin := make(map[int64]bool)
	for _, f := range h.Faults {
		for _, r := range f.Revs {
			admin[r] = true
		}
		if len(f.Keys) == 0 {
			continue
		}
		create := make(map[string]int64) // each named key's incarnation
		for _, e := range h.Events {
			i := slices.Index(f.Keys, e.Key)
			switch {
			case i < 0:
			case !e.Delete:
				create[e.Key] = e.Create
			case i < len(f.Tokens) && create[e.Key] == f.Tokens[i] && e.Rev > f.RevFrom && (f.RevTo == 0 || e.Rev <= f.RevTo):
				admin[e.Rev] = true
			}
		}
	}
	return admin
}

// preemptions are the revisions at which a Preferred election's leader
// key was deleted by a preemption: with the end request on its lease, no
// release mark and no successor's key in the same revision. Its leader
// learns it from its watch, after: not promised (package election).
func preemptions(h *History, n NameInfo) map[int64]bool {
	out := map[int64]bool{}
	if !n.Preferred {
		return out
	}
	byRev := map[int64][]history.Event{}
	for _, e := range h.Events {
		byRev[e.Rev] = append(byRev[e.Rev], e)
	}
	for rev, evs := range byRev {
		leader, end, other := "", false, false
		for _, e := range evs {
			switch {
			case e.Delete && isContender(n, e.Key):
				leader = shortKey(e.Key)
			case !e.Delete && isContender(n, e.Key), strings.HasSuffix(e.Key, "/released"), strings.HasSuffix(e.Key, "/released-b"):
				other = true
			}
		}
		for _, e := range evs {
			if e.Delete && leader != "" && strings.Contains(e.Key, "/candidate/") && strings.HasSuffix(e.Key, "/"+leader) && !isContender(n, e.Key) {
				end = true
			}
		}
		if leader != "" && end && !other {
			out[rev] = true
		}
	}
	return out
}

// childStalled is the time holder process client stood still within
// [from, to], by its own meter.
func (h *History) childStalled(client string, from, to int64) time.Duration {
	return harness.Stalled(h.ChildStalls[client], from, to)
}

// toldFirst judges one handover from prev, whose grant was first seen at seen. In-process
// holds are judged by what was checked at the moment: whether prev's
// Context had ended when the event log received its key's deletion. A
// child's, by its clock readings.
func toldFirst(prev *Hold, seen int64) (bool, string) {
	if prev.Child && prev.DeadOnReturn {
		return true, "" // its process saw it ended when the call returned it
	}
	if !prev.Child && prev.DeleteSeen != 0 {
		return prev.Told, "had not been told when its key's deletion was seen"
	}
	if !prev.Child && prev.Acquired >= seen {
		// Returned after its key's deletion was seen: only a handle
		// already ended on return was told first.
		return prev.DeadOnReturn, "was returned as a holder, not yet told, after its key's deletion was seen"
	}
	switch {
	case prev.Ended == 0:
		return false, "was never told"
	case strings.Contains(prev.Cause, "released") || prev.Ended < seen:
		return true, ""
	}
	return false, fmt.Sprintf("was told %v after the grant was seen", time.Duration(prev.Ended-seen).Round(time.Millisecond))
}

func shortKey(k string) string { return k[strings.LastIndexByte(k, '/')+1:] }

// trueState is n's holder (and an election's value) after each revision.
type trueState struct {
	rev        int64
	key, value string
	create     int64
}

func truth(events []history.Event, n NameInfo) []trueState {
	var out []trueState
	var live []history.Entry
	values := make(map[string]string)
	for _, ev := range events {
		if !isContender(n, ev.Key) {
			continue
		}
		idx := -1
		for i, e := range live {
			if e.Key == ev.Key {
				idx = i
			}
		}
		if ev.Delete {
			if idx >= 0 {
				live = append(live[:idx], live[idx+1:]...)
			}
			delete(values, ev.Key)
		} else {
			if idx < 0 {
				live = append(live, history.Entry{Key: ev.Key, Create: ev.Create})
				sort.Slice(live, func(a, b int) bool { return live[a].Create < live[b].Create })
			}
			values[ev.Key] = ev.Value
		}
		s := trueState{rev: ev.Rev}
		if len(live) > 0 {
			s.key, s.create = live[0].Key, live[0].Create
			if n.Prim == "election" {
				s.value = values[s.key]
			}
		}
		if k := len(out); k > 0 && out[k-1].rev == ev.Rev {
			out[k-1] = s
		} else if k == 0 || out[k-1].key != s.key || out[k-1].create != s.create || out[k-1].value != s.value {
			out = append(out, s)
		}
	}
	return out
}

// at is the true state as of rev.
func stateAt(ts []trueState, rev int64) trueState {
	i := sort.Search(len(ts), func(i int) bool { return ts[i].rev > rev })
	if i == 0 {
		return trueState{}
	}
	return ts[i-1]
}

// checkObserve checks every Observe stream of n: revisions strictly
// increasing, each state the true one at its revision, never the same
// state twice in a row, and after each fault the stream catches up with
// the last change made before the fault ended.
func checkObserve(h *History, n NameInfo, rep *Report) {
	ts := truth(h.Events, n)
	streams := make(map[int][]ObsState)
	var ids []int
	for _, s := range h.States {
		if s.Prim == n.Prim && s.Name == n.Name {
			if _, ok := streams[s.Stream]; !ok {
				ids = append(ids, s.Stream)
			}
			streams[s.Stream] = append(streams[s.Stream], s)
		}
	}
	sort.Ints(ids)
	for _, id := range ids {
		ss := streams[id]
		rep.Histories++
		for i, s := range ss {
			if i > 0 {
				p := ss[i-1]
				if s.Rev <= p.Rev {
					rep.add("observe", fmt.Sprintf("%s %s stream %d went back in time: rev %d after rev %d", n.Prim, n.Name, id, s.Rev, p.Rev), s.Rev)
				}
				if n.Prim == "mutex" && s.Key == p.Key && s.Token == p.Token {
					rep.add("observe", fmt.Sprintf("%s %s stream %d sent the same holder twice: %q (token %d) at rev %d and %d", n.Prim, n.Name, id, shortKey(s.Key), s.Token, p.Rev, s.Rev), s.Rev)
				}
			}
			if h.End != 0 && s.Rev >= h.End {
				continue // after the event log's end: nothing to compare with
			}
			want := stateAt(ts, s.Rev)
			if want.key != s.Key || want.create != s.Token || want.value != s.Value {
				rep.add("observe", fmt.Sprintf("%s %s stream %d at rev %d said %q (token %d) %q, but etcd had %q (token %d) %q", n.Prim, n.Name, id, s.Rev,
					shortKey(s.Key), s.Token, s.Value, shortKey(want.key), want.create, want.value), s.Rev)
			}
		}
	}
	// Convergence: a stream alive for settle after a fault's end has by
	// its end caught up with the last change seen before the fault ended.
	const settle = int64(10e9)
	points := make([]int64, 0, len(h.Faults)+1)
	for _, f := range h.Faults {
		points = append(points, f.End)
	}
	if h.Settled != 0 {
		points = append(points, h.Settled)
	}
	for _, e := range points {
		var last trueState // last change seen before e
		for _, s := range ts {
			if at, ok := h.seenAt(s.rev); ok && at <= e {
				last = s
			}
		}
		if last.rev == 0 {
			continue
		}
		for _, id := range ids {
			ss := streams[id]
			first, end := ss[0].At, h.streamEnd(id)
			if first > e || end < e || (e != h.Settled && end < e+settle) {
				continue
			}
			if e != h.Settled && harness.Stalled(h.Stalls, e, e+settle) > time.Duration(settle)/2 {
				// This process stood still for half the time the stream had.
				rep.judged("observe convergence not judged (starved)")
				continue
			}
			rep.Converge++
			if ss[len(ss)-1].Rev < last.rev {
				rep.add("observe", fmt.Sprintf("%s %s stream %d did not converge: last state at rev %d, etcd changed to %q at rev %d before %s",
					n.Prim, n.Name, id, ss[len(ss)-1].Rev, shortKey(last.key), last.rev, since(h.Start, e)), last.rev)
			}
		}
	}
}

// checkSharedKeys checks that no acquisition in this process returned a
// key incarnation another live hold of this process still had: one key,
// two holders, which etcd sees as one. (A Campaign that takes over its
// session's key ends the earlier term first.) Judged at the moment the
// acquisition returned.
func checkSharedKeys(h *History, rep *Report) {
	rep.Histories++
	for _, p := range h.Holds {
		for _, x := range p.Untold {
			if x.Key == p.Key && x.Token == p.Token {
				rep.add("shared-key", fmt.Sprintf("%s %s: %s acquired %s (token %d) at %s while %s still held it: two holders on one key",
					x.Prim, x.Name, x.Client, shortKey(x.Key), x.Token, since(h.Start, x.Acquired), p.Client), x.Token)
			}
		}
	}
}
