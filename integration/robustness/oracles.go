package robustness

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// checkGranted checks that every acquisition that returned a holder
// returned a key incarnation etcd let hold: one that was, at some
// revision, allowed by the primitive's rule (the oldest key of a mutex or
// an election). A skipped candidate whose key a hand-over moved, a waiter
// whose key went with the key ahead, must not return with the key it had:
// that is leading out of turn, with a key that never led. A handle
// returned already ended never held and is not judged.
func checkGranted(h *History, rep *Report) {
	rep.Histories++
	granted := map[incarnation]bool{}
	deleted := map[incarnation]int64{}
	for _, n := range h.Names {
		gs, ds := replay(h.Events, n)
		for _, g := range gs {
			granted[incarnation{g.key, g.create}] = true
		}
		for k, v := range ds {
			deleted[k] = v
		}
	}
	admin := adminRevs(h)
	for _, x := range h.Holds {
		if x.DeadOnReturn || h.End == 0 {
			continue
		}
		inc := incarnation{x.Key, x.Token}
		if first, ok := h.firstRev(); ok && x.Token < first {
			continue
		}
		if d, ok := deleted[inc]; ok && x.Foreign && !granted[inc] && admin[d] {
			// etcd's Campaign returns once the keys ahead are gone without
			// reading its own: an operator's range delete of them all
			// makes it lead with no key. etcd's, under a fault.
			rep.judged("granted: not promised (an etcd Campaign whose key an operator deleted)")
			continue
		}
		rep.judged("granted")
		if granted[inc] {
			continue
		}
		what := "never deleted"
		if d, ok := deleted[inc]; ok {
			what = fmt.Sprintf("deleted at rev %d", d)
		}
		rep.add("granted", fmt.Sprintf("%s %s: %s's acquisition returned at %s as holder of %s (token %d), which etcd never let hold (%s): it acted out of turn",
			x.Prim, x.Name, x.Client, since(h.Start, x.Acquired), shortKey(x.Key), x.Token, what), max(x.Token, deleted[inc]))
	}
}

// firstRev is the first revision of the event log.
func (h *History) firstRev() (int64, bool) {
	if len(h.Events) == 0 {
		return 0, false
	}
	return h.Events[0].Rev, true
}

// lockDelayTolerance allows for the event watch hearing of a loss late
// (the lease that times the delay is granted after the loss, on etcd's
// leader, so the true margin is on the acquisition's side).
const lockDelayTolerance = 250 * time.Millisecond

// checkLockDelay checks the lock-delay: after a holder of a name whose
// contenders all use one is lost without releasing (its key deleted while
// its lock-delay record stays), no later holder's acquisition returns
// within the delay of the loss, on the event watch's clock; and, by
// etcd's revisions, no later holder writes before the lock-delay marker
// of that loss, on a lease etcd's leader times, is gone.
func checkLockDelay(h *History, rep *Report) {
	for _, n := range h.Names {
		if n.Delay == 0 {
			continue
		}
		rep.Histories++
		grants, deleted := replay(h.Events, n)
		held := map[incarnation]bool{}
		for _, g := range grants {
			held[incarnation{g.key, g.create}] = true
		}
		records := map[string]bool{} // record keys that exist
		recDeleted := map[int64]map[string]bool{}
		markerGone := map[string][]int64{} // by what follows until/: deletion revisions of its markers
		for _, e := range h.Events {
			switch {
			case strings.HasPrefix(e.Key, n.DelayPrefix+"held/"):
				if e.Delete {
					delete(records, e.Key)
					if recDeleted[e.Rev] == nil {
						recDeleted[e.Rev] = map[string]bool{}
					}
					recDeleted[e.Rev][e.Key] = true
				} else {
					records[e.Key] = true
				}
			case strings.HasPrefix(e.Key, n.DelayPrefix+"until/") && e.Delete:
				id := strings.TrimPrefix(e.Key, n.DelayPrefix+"until/")
				markerGone[id] = append(markerGone[id], e.Rev)
			}
		}
		// Replay again for the losses, with the records as of each
		// revision.
		records = map[string]bool{}
		type loss struct {
			inc incarnation
			rev int64
		}
		var losses []loss
		for _, e := range h.Events {
			if strings.HasPrefix(e.Key, n.DelayPrefix+"held/") {
				if e.Delete {
					delete(records, e.Key)
				} else {
					records[e.Key] = true
				}
				continue
			}
			if !e.Delete || !isContender(n, e.Key) {
				continue
			}
			inc := incarnation{e.Key, e.Create}
			// The hold's record: held/<segment>/<token>, or an older build's
			// held/<segment>.
			for _, rec := range []string{n.DelayPrefix + "held/" + delayID(e.Key, e.Create), n.DelayPrefix + "held/" + shortKey(e.Key)} {
				if held[inc] && deleted[inc] == e.Rev && (records[rec] || recDeleted[e.Rev][rec]) && !recDeleted[e.Rev][rec] {
					losses = append(losses, loss{inc, e.Rev})
					break
				}
			}
		}
		firstWrite := map[incarnation]int64{}
		for _, e := range h.Events {
			if e.Key == n.Work && !e.Delete {
				for _, x := range h.Holds {
					if x.Prim == n.Prim && x.Name == n.Name && x.Key == e.Value {
						inc := incarnation{x.Key, x.Token}
						if _, ok := firstWrite[inc]; !ok && e.Rev > x.Token {
							firstWrite[inc] = e.Rev
						}
					}
				}
			}
		}
		for _, l := range losses {
			at, ok := h.seenAt(l.rev)
			if !ok {
				continue
			}
			for _, x := range h.Holds {
				if x.Prim != n.Prim || x.Name != n.Name || x.Token <= l.inc.create || x.DeadOnReturn || x.Acquired < at-int64(time.Second) {
					continue
				}
				rep.judged("lock-delay")
				early := at + int64(n.Delay-lockDelayTolerance) - x.Acquired // how far within the delay
				switch {
				case early <= 0:
				case h.watchLate(at-int64(n.Delay), at):
					rep.judged("lock-delay clock excused: the event watch may have heard the loss late")
				case harness.Stalled(h.Stalls, at-int64(n.Delay), at) >= time.Duration(early):
					// This process stood still long enough to have heard
					// the loss that late: etcd's revisions judge alone.
					rep.judged("lock-delay clock not judged (starved)")
				default:
					rep.add("lock-delay", fmt.Sprintf("%s %s: %s acquired (token %d) at %s, %v after %s (token %d) was lost without releasing at rev %d (seen at %s): within the lock-delay of %v",
						n.Prim, n.Name, x.Client, x.Token, since(h.Start, x.Acquired), time.Duration(x.Acquired-at).Round(time.Millisecond),
						shortKey(l.inc.key), l.inc.create, l.rev, since(h.Start, at), n.Delay), l.rev)
				}
				w, ok := firstWrite[incarnation{x.Key, x.Token}]
				if !ok || w < l.rev {
					continue
				}
				gone := int64(0)
				for _, r := range append(markerGone[delayID(l.inc.key, l.inc.create)], markerGone[shortKey(l.inc.key)]...) {
					if r > l.rev && (gone == 0 || r < gone) {
						gone = r
					}
				}
				if gone == 0 || gone > w {
					rep.add("lock-delay", fmt.Sprintf("%s %s: %s (token %d) wrote at rev %d before the lock-delay marker of %s (token %d, lost at rev %d) was gone (%s)",
						n.Prim, n.Name, x.Client, x.Token, w, shortKey(l.inc.key), l.inc.create, l.rev, markerWhen(gone)), w)
				}
			}
		}
	}
}

// delayID names one hold of key (created at create) in its lock-delay
// record's and marker's keys: <segment>/<token>.
func delayID(key string, create int64) string {
	return shortKey(key) + "/" + strconv.FormatInt(create, 10)
}

// checkDrained checks the shard package's drain: a shard moved from a
// member (its Context ended with the move's cause) is taken by the next
// owner only once its fn returned, the return and the next fn's start
// timed in this process on one clock. The next owner is the hold of the
// shard with the next token.
func checkDrained(h *History, rep *Report) {
	returned := map[incarnation]int64{}
	for _, o := range h.Ops {
		if o.Kind == "shard.Return" {
			returned[incarnation{o.Key, o.Token}] = o.Return
		}
	}
	byName := map[string][]*Hold{}
	for _, x := range h.Holds {
		if x.Prim == "shard" && !x.Child {
			byName[x.Name] = append(byName[x.Name], x)
		}
	}
	// A shard whose key a fault deleted (a member's lease revoked: the
	// shard traffic's crash, an admin) was lost, not moved, even where its
	// member's loop ended it as moved before it heard why: no drain is due.
	admin := adminRevs(h)
	lost := map[incarnation]bool{}
	for _, n := range h.Names {
		if n.Prim != "shard" {
			continue
		}
		_, deleted := replay(h.Events, n)
		for inc, rev := range deleted {
			if admin[rev] {
				lost[inc] = true
			}
		}
	}
	for name, xs := range byName {
		sort.Slice(xs, func(i, j int) bool { return xs[i].Token < xs[j].Token })
		rep.Histories++
		for i := 0; i+1 < len(xs); i++ {
			x, y := xs[i], xs[i+1]
			ret, ok := returned[incarnation{x.Key, x.Token}]
			if !ok || !strings.Contains(x.Cause, "moved") || x.Ended == 0 || ret-x.Ended >= int64(shardDrain) || lost[incarnation{x.Key, x.Token}] {
				continue // not a move, released at the drain timeout as promised, or lost
			}
			rep.judged("drained")
			if y.Acquired < ret {
				rep.add("drained", fmt.Sprintf("shard %s: %s (token %d) started at %s, %v before the fn of %s (token %d, moved: %s) returned",
					name, y.Client, y.Token, since(h.Start, y.Acquired), time.Duration(ret-y.Acquired).Round(time.Microsecond), x.Client, x.Token, x.Cause), y.Token)
			}
		}
	}
}

// shardOwnedBound bounds how long a shard of the shard traffic's group may
// have no key queued while a member that could take it had been live for
// shardSettle: the round trip of the member whose assignment gives it the
// shard (its view of the change, its enqueue), with room for a loaded
// machine. A member that just joined is given shardSettle first: its join
// reads the group and starts its watch before it acts, which on a loaded
// machine took 2.4 s.
const (
	shardOwnedBound = 2 * time.Second
	shardSettle     = 3 * time.Second
)

// checkOwned checks the shard group's assignment from etcd's history: a
// shard with no key in its queue while some live member (its member key
// present) is not stuck on it (its member key names the shards whose fn
// outlived the drain there) gets a key within shardOwnedBound of the
// later of the stretch's start and that member's join + shardSettle,
// unless a fault of the cluster or of a client, or a disturbance, was
// near: every member computes who takes it, and one does. A member whose assignment
// missed a shard (the incremental assigner), or a shard given back to the
// member its fn is stuck on (the stuck reassignment), leaves it unqueued
// for as long as the group does not change.
func checkOwned(h *History, rep *Report) {
	var group string
	for _, n := range h.Names {
		if n.Prim == "shard" {
			group = n.Prefix[:len(n.Prefix)-len("s/00000/")]
			break
		}
	}
	if group == "" {
		return
	}
	rep.Histories++
	members := map[string][]int{} // live member -> its stuck shards
	joined := map[string]int64{}  // live member -> when its key was made
	queued := make([]int, shardCount)
	begun := make([]int64, shardCount) // the revision an unqueued stretch began; 0: none
	eligible := func(s int) []string {
		var out []string
		for m, stuck := range members {
			if !slices.Contains(stuck, s) {
				out = append(out, m)
			}
		}
		sort.Strings(out)
		return out
	}
	judge := func(s int, from, to int64, live []string, settled int64) {
		t1, ok1 := h.seenAt(from)
		t2, ok2 := h.seenAt(to)
		if !ok1 || !ok2 {
			return
		}
		// Judged up to the first fault of the cluster or of a client, or
		// disturbance, near it: the members may not have heard, or could
		// not act, from then on; not at all if one was in progress as it
		// began.
		if f, ok := h.firstTrouble(t1-int64(time.Second), t2); ok {
			if f <= t1 {
				return
			}
			t2 = f
		}
		start := max(t1, settled)
		if start >= t2 {
			return // none of them had settled in
		}
		rep.judged("owned")
		if d := time.Duration(t2 - start); d > shardOwnedBound {
			rep.add("owned", fmt.Sprintf("shard g0/%05d: no member queued on it for %v (revisions %d to %d, from %s, judged to %s) while %v were live and not stuck on it",
				s, time.Duration(t2-t1).Round(time.Millisecond), from, to, since(h.Start, t1), since(h.Start, t2), live), from)
		}
	}
	var last int64
	live := make([][]string, shardCount) // who could take each unqueued shard when it began
	settled := make([]int64, shardCount) // when the first of them had been live shardSettle
	step := func(rev int64) {
		for s := range queued {
			open := queued[s] == 0 && len(members) > 0
			var can []string
			if open {
				can = eligible(s)
				open = len(can) > 0
			}
			switch {
			case open && begun[s] == 0:
				begun[s], live[s], settled[s] = rev, can, 1<<62
				for _, m := range can {
					settled[s] = min(settled[s], joined[m]+int64(shardSettle))
				}
			case !open && begun[s] != 0:
				judge(s, begun[s], rev, live[s], settled[s])
				begun[s] = 0
			}
		}
	}
	for _, e := range h.Events {
		rest, ok := strings.CutPrefix(e.Key, group)
		if !ok {
			continue
		}
		if last != 0 && e.Rev != last {
			step(last)
		}
		last = e.Rev
		if name, ok := strings.CutPrefix(rest, "m/"); ok {
			if e.Delete {
				delete(members, name)
				delete(joined, name)
				continue
			}
			if e.Create == e.Rev {
				joined[name], _ = h.seenAt(e.Rev)
			}
			var v struct {
				Stuck []int `json:"stuck"`
			}
			_ = json.Unmarshal([]byte(e.Value), &v)
			members[name] = v.Stuck
			continue
		}
		idText, _, _ := strings.Cut(strings.TrimPrefix(rest, "s/"), "/")
		id, err := strconv.Atoi(idText)
		if err != nil || id < 0 || id >= shardCount {
			continue
		}
		switch {
		case e.Delete:
			queued[id]--
		case e.Create == e.Rev:
			queued[id]++
		}
	}
	if last != 0 {
		step(last)
	}
}

// firstTrouble is the earliest start (from at the earliest) of a fault of
// the cluster (watchLate's kinds) or of a client (cut off, slowed, its
// clock skewed, its process stopped), or of a disturbance, in progress in
// [from, to].
func (h *History) firstTrouble(from, to int64) (int64, bool) {
	first, ok := int64(0), false
	see := func(start, end int64) {
		if start <= to && (end == 0 || end >= from) {
			if t := max(start, from); !ok || t < first {
				first, ok = t, true
			}
		}
	}
	for _, d := range h.Disturbances {
		see(d.Start, d.End)
	}
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultMemberKill, FaultQuorumLoss, FaultLeaderTransfer, FaultCompact, FaultMemberIsolate,
			FaultBlackhole, FaultSlowLink, FaultClockSkew, FaultFreeze:
			see(f.Start, f.End)
		}
	}
	return first, ok
}

// watchLate reports whether the event watch may have heard an event of
// [from, to] late: a fault of the cluster (a member killed, isolated or
// out of quorum, a leader moved, a compaction) or a disturbance in
// progress then. Its clock then says when a deletion was heard, not when
// etcd applied it, and only etcd's revisions judge.
func (h *History) watchLate(from, to int64) bool {
	for _, d := range h.Disturbances {
		if d.Start <= to && d.End >= from {
			return true
		}
	}
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultMemberKill, FaultQuorumLoss, FaultLeaderTransfer, FaultCompact, FaultMemberIsolate:
		default:
			continue
		}
		if e := f.End; f.Start <= to && (e == 0 || e >= from) {
			return true
		}
	}
	return false
}

func markerWhen(rev int64) string {
	if rev == 0 {
		return "no marker expired after the loss"
	}
	return fmt.Sprintf("its lease expired at rev %d", rev)
}

// checkFrozenFenced checks what the knows-first check cannot for a holder
// stopped with SIGSTOP (it could not be told anything): every register
// write it made with its token after its key was gone was rejected by
// the fence (stale, or refused as no longer held), none accepted.
func checkFrozenFenced(h *History, rep *Report) {
	rep.Histories++
	deleted := map[incarnation]int64{}
	for _, n := range h.Names {
		_, ds := replay(h.Events, n)
		for k, v := range ds {
			deleted[k] = v
		}
	}
	for _, x := range h.Holds {
		if !x.Frozen {
			continue
		}
		d, ok := deleted[incarnation{x.Key, x.Token}]
		if !ok {
			continue
		}
		at, ok := h.seenAt(d)
		if !ok {
			continue
		}
		for _, r := range h.Regs {
			if r.Read || r.Token != x.Token || r.Resource != x.Prim+"/"+x.Name || r.Call <= at {
				continue
			}
			switch r.Outcome {
			case "accepted":
				rep.add("frozen-fenced", fmt.Sprintf("%s %s: %s, frozen while it held (token %d), wrote %q at %s after its key went (rev %d), and the fence accepted it",
					x.Prim, x.Name, x.Client, x.Token, r.Value, since(h.Start, r.Call), d), d)
			case "stale", "lost":
				rep.judged("frozen late writes rejected")
			}
		}
	}
}

// checkDistinctTokens checks that no two contender keys of one name were
// created in one revision. A queue's order is its keys' CreateRevisions:
// two keys created together are neither ahead of the other (each counts
// only the keys older than it, so two writers or permits may hold as one,
// or each wait for the other), and their holders carry one fencing token,
// which no guard tells apart. A session's enqueue groups put keys of
// different queues in one transaction, never two of one; a Set puts one
// key per name.
func checkDistinctTokens(h *History, rep *Report) {
	rep.Histories++
	for _, n := range h.Names {
		created := map[int64]string{}
		for _, e := range h.Events {
			if e.Delete || e.Create != e.Rev || !isContender(n, e.Key) {
				continue
			}
			rep.judged("distinct-tokens")
			if k, ok := created[e.Rev]; ok && k != e.Key {
				rep.add("distinct-tokens", fmt.Sprintf("%s %s: %s and %s created in one revision: neither is ahead of the other, and their holders share fencing token %d",
					n.Prim, n.Name, shortKey(k), shortKey(e.Key), e.Rev), e.Rev)
				continue
			}
			created[e.Rev] = e.Key
		}
	}
}

// serveFaultNear reports whether, at some moment of [from, to], the
// service's delivery could have been held up: a disturbance (a loaded
// machine's too), a fault of the cluster's, one that hit the serve kind's
// clients or process, or an operator's that names keys under prefixes.
// Faults of other clients' connections alone do not count.
func (h *History) serveFaultNear(from, to int64, prefixes []string) bool {
	return h.faultIn(from, to, prefixes, true, func(clients []string) bool {
		return len(clients) == 0 || slices.ContainsFunc(clients, func(c string) bool { return strings.HasPrefix(c, TrafficServe) })
	})
}

// checkRequestDelivered checks that an operator's release request to a
// serve caller that went on holding reached its stream within
// serveAskWait, unless a fault or a disturbance was in progress during
// the wait.
func checkRequestDelivered(h *History, rep *Report) {
	rep.Histories++
	for _, o := range h.Ops {
		switch o.Kind {
		case opReleaseRequested:
			rep.judged("request-delivered")
		case opReleaseRequested + ".timeout":
			var prefixes []string
			for _, n := range h.Names {
				if n.Prim == "mutex" && n.Name == o.Name {
					prefixes = append(prefixes, n.Prefix)
				}
			}
			if h.serveFaultNear(o.Call, o.Return, prefixes) {
				rep.knows("request", "not delivered, a fault near")
				continue
			}
			rep.judged("request-delivered")
			rep.add("request-delivered", fmt.Sprintf("%s %s: an operator's release request (put at %s) did not reach the holder's stream (token %d) in %s, the hold going on, no fault near",
				o.Client, o.Name, since(h.Start, o.Call), o.Token, serveAskWait), 0)
			rep.Violations[len(rep.Violations)-1].At = time.Duration(o.Return - h.Start)
		}
	}
}
