package robustness

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/keys"
)

// DefaultFreeBound is how long, with no fault near, a contender first in
// line on a free lock may take to hold at least: a few round trips of a
// loaded machine running the race detector (a grant's read and
// confirmation are one or two; the event watch that times the grant may
// lag by one).
const DefaultFreeBound = 1500 * time.Millisecond

// freeRoundTrips is the free-lock bound in the run's own round trips: a
// grant's bound is this many times the longest round trip of the health
// watch's linearizable reads in progress meanwhile, when that is longer
// than the configured bound. A machine whose every request is slow at
// that moment (a loaded disk, a starved process) gets the time its
// requests take; a waiter that sleeps through a release does not, since
// the reads beside it do not wait for it.
const freeRoundTrips = 4

// freeDeadline is when the contender granted at from must have returned
// or gone: base after from, or freeRoundTrips of the longest round trip
// in progress until then when longer, and then the time this process was
// not run within it (h.Stalls) added. It also returns that round trip and
// the stalls added.
func (h *History) freeDeadline(from int64, base time.Duration) (deadline int64, rtt, stalled time.Duration) {
	deadline = from + int64(base)
	for range 20 {
		rtt = max(rtt, h.rttNear(from, deadline))
		b := max(base, freeRoundTrips*rtt)
		stalled = harness.Stalled(h.Stalls, from, max(deadline, from+int64(b)))
		end := from + int64(b) + int64(stalled)
		if end <= deadline {
			break
		}
		deadline = end
	}
	return deadline, rtt, stalled
}

// rttNear is the longest round trip of the health watch's reads in
// progress at some moment of [from, to], less the time this process was
// not run during it (its stalls are added once, by freeDeadline); zero if
// none was.
func (h *History) rttNear(from, to int64) time.Duration {
	var out time.Duration
	i := sort.Search(len(h.Probes), func(i int) bool { return h.Probes[i].At > to })
	for i--; i >= 0 && h.Probes[i].At >= from-int64(probeTimeout); i-- {
		if p := h.Probes[i]; p.At+int64(p.RTT) >= from {
			out = max(out, p.RTT-harness.Stalled(h.Stalls, p.At, p.At+int64(p.RTT)))
		}
	}
	return out
}

// unit is what one acquisition waits for: one key incarnation, or the
// keys of a mutex Set, which share their CreateRevision and hold together.
type unit struct {
	incs     []incarnation
	names    []string
	granted  int // incarnations granted
	grantRev int64
	grantAt  int64 // when the last of its grants was seen
	endRev   int64 // first deletion of one of its keys
	endAt    int64
	value    string
}

// checkFreeLock checks that a free lock is taken: once a contender's key
// is allowed to hold (every key of a Set's), the acquisition that put it
// returns within the bound, or its key goes within the bound (it gave up,
// or its session ended). A key that stays first in line, unheld, for
// longer is a waiter that does not see the lock is free, or a key left
// behind by a call that returned; with a fault near (grace: a TTL and two
// seconds before, for a client to reconnect and resume its watches) it
// is excused and counted. A lock-delay name's grant counts from the end
// of the lock-delay markers it had to wait for.
//
// The bound follows the run (freeBound): at least cfg.FreeBound, or
// freeRoundTrips of its own round trips; and each grant's deadline is
// moved on by the time this process was not run meanwhile (h.Stalls), so
// that a starved machine is not taken for a waiter that missed its turn.
// A grant whose stalls add more than the bound itself is not judged
// (starved), and counted.
func checkFreeLock(h *History, cfg Config, rep *Report) {
	rep.Histories++
	judged := 0
	defer func() { rep.Oracles["free-lock"] += judged }()
	base := cfg.FreeBound
	if base <= 0 {
		base = DefaultFreeBound
	}
	var longest time.Duration // the longest bound a grant got
	longer := 0               // grants whose bound the round trips or stalls made longer
	grace := int64(cfg.TTL) + int64(2*time.Second)
	end := h.Settled
	if end == 0 && len(h.Seen) > 0 {
		end = h.Seen[len(h.Seen)-1].At // a history without its settling
	}
	prefixOf := map[string]string{}
	for _, n := range h.Names {
		prefixOf[n.Prim+" "+n.Name] = n.Prefix
	}
	units := map[string]*unit{} // by key incarnation, or "set/<create>"
	var order []string
	values := map[incarnation]string{}
	for _, e := range h.Events {
		if !e.Delete {
			values[incarnation{e.Key, e.Create}] = e.Value
		}
	}
	for _, n := range h.Names {
		grants, deleted := replay(h.Events, n)
		markers := lockDelayMarkers(h, n)
		for _, g := range grants {
			inc := incarnation{g.key, g.create}
			id := g.key + "/" + fmt.Sprint(g.create)
			isSet := keys.TagOf(g.key) == keys.TagSet
			if isSet {
				id = "set/" + fmt.Sprint(g.create)
			}
			u := units[id]
			if u == nil {
				u = &unit{endRev: 1<<63 - 1, endAt: end, value: values[inc]}
				units[id] = u
				order = append(order, id)
			}
			u.incs = append(u.incs, inc)
			u.names = append(u.names, n.Prim+" "+n.Name)
			u.granted++
			at, ok := h.seenAt(g.rev)
			if !ok {
				at = end
			}
			for _, m := range markers {
				// A marker alive at the grant, or put before the
				// incarnation's end, holds the acquisition back.
				if d := deleted[inc]; m.del >= g.rev && (d == 0 || m.put < d) {
					if d, ok := h.seenAt(m.del); ok {
						at = max(at, d)
					} else {
						at = max(at, end) // it outlived the history: held back throughout
					}
				}
			}
			if at > u.grantAt {
				u.grantAt, u.grantRev = at, g.rev
			}
			if d, ok := deleted[inc]; ok && d < u.endRev {
				u.endRev = d
				if t, ok := h.seenAt(d); ok {
					u.endAt = t
				}
			}
		}
	}
	// A Set's unit is whole only when every one of its keys was granted.
	setKeys := map[int64]int{}
	for _, e := range h.Events {
		if !e.Delete && keys.TagOf(e.Key) == keys.TagSet && e.Create == e.Rev {
			setKeys[e.Create]++
		}
	}
	returned := map[incarnation]int64{}
	for _, x := range h.Holds {
		inc := incarnation{x.Key, x.Token}
		if r, ok := returned[inc]; !ok || x.Acquired < r {
			returned[inc] = x.Acquired
		}
	}
	var lat []time.Duration
	for _, id := range order {
		u := units[id]
		if strings.HasPrefix(id, "set/") && u.granted < setKeys[u.incs[0].create] {
			continue // a key granted, not all: the Set still waits
		}
		if u.grantAt >= end || u.grantAt >= u.endAt {
			continue
		}
		deadline, rtt, stalled := h.freeDeadline(u.grantAt, base)
		if d := time.Duration(deadline - u.grantAt); d > base {
			longer++
			longest = max(longest, d)
		}
		var prefixes []string
		for _, nm := range u.names {
			prefixes = append(prefixes, prefixOf[nm])
		}
		ret := int64(0)
		for _, inc := range u.incs {
			if r, ok := returned[inc]; ok && (ret == 0 || r < ret) {
				ret = r
			}
		}
		if h.etcdctlKey(u.value, u.grantAt) {
			rep.free("not promised: an etcdctl process")
			continue
		}
		if !h.faultNear(u.grantAt-grace, deadline, prefixes...) {
			judged++ // with faults off
		}
		switch {
		case ret != 0 && ret <= deadline:
			if ret > u.grantAt+int64(base) {
				rep.free("taken within a longer bound")
			} else {
				rep.free("taken")
			}
			if !h.faultNear(u.grantAt-grace, deadline, prefixes...) {
				lat = append(lat, time.Duration(max(0, ret-u.grantAt)))
			}
			continue
		case ret == 0 && u.endAt <= deadline:
			if u.endAt > u.grantAt+int64(base) {
				rep.free("left within a longer bound")
			} else {
				rep.free("left within the bound")
			}
			continue
		case h.faultNear(u.grantAt-grace, min(deadline, u.endAt), prefixes...):
			rep.free("excused: fault near")
			continue
		case rtt == 0 && stalled > base:
			// No read answered meanwhile, and this process stood still
			// longer than the bound: nothing tells a hang from the machine.
			rep.free("not judged (starved)")
			continue
		}
		rep.free("violation")
		what := "never returned while its key lasted"
		if ret != 0 {
			what = fmt.Sprintf("returned only at %s, %v after", since(h.Start, ret), time.Duration(ret-u.grantAt).Round(time.Millisecond))
		}
		gone := "never deleted"
		if u.endRev != 1<<63-1 {
			gone = fmt.Sprintf("deleted at rev %d (%s, %v after)", u.endRev, since(h.Start, u.endAt), time.Duration(u.endAt-u.grantAt).Round(time.Millisecond))
		}
		rep.add("free-lock", fmt.Sprintf("%s: %s (token %d, by %q) was first in line on a free lock from rev %d (seen at %s), no fault near; its acquisition %s (bound %v: %v, round trips of %v meanwhile, and %v this process stood still); its key %s",
			strings.Join(u.names, ", "), shortKey(u.incs[0].key), u.incs[0].create, trim(u.value), u.grantRev, since(h.Start, u.grantAt), what,
			time.Duration(deadline-u.grantAt).Round(time.Millisecond), base, rtt.Round(time.Millisecond), stalled.Round(time.Millisecond), gone), u.grantRev)
	}
	rep.FreeBound = fmt.Sprintf("bound %v, or %d round trips of the reads in progress and this process's stalls when longer: %d grants judged with a longer one, up to %v",
		base, freeRoundTrips, longer, longest.Round(time.Millisecond))
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		q := func(p float64) time.Duration {
			return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
		}
		rep.FreeLatency = fmt.Sprintf("grant seen to return, faults off: p50 %v, p99 %v, max %v of %d (bound %v)", q(0.5), q(0.99), lat[len(lat)-1].Round(time.Millisecond), len(lat), base)
	}
}

// etcdctlKey: a key an etcdctl process may have put (etcdctl lock's
// keys have no value, as etcd's concurrency.Mutex's; etcdctl elect's is
// the proposal, which names it) granted while the etcdctl traffic ran.
// Its acquisition returns when the process printed its key and the
// suite read it: a process's start and its pipe, not baton's promise.
func (h *History) etcdctlKey(value string, at int64) bool {
	if value != "" && !strings.HasPrefix(value, TrafficEtcdctl+".") {
		return false
	}
	for _, t := range h.Traffic {
		if t.Kind == TrafficEtcdctl && t.Start <= at && at <= t.End {
			return true
		}
	}
	return false
}

// faultNear reports whether a fault or a disturbance other than load was
// in progress at some moment of [from, to]; an operator's fault that
// names its keys counts only for names under prefixes (none given: for
// all).
func (h *History) faultNear(from, to int64, prefixes ...string) bool {
	return h.faultIn(from, to, prefixes, false, nil)
}

// faultIn is faultNear, counting load disturbances too when load, and
// only the faults of clients that hit says count (nil: every one).
func (h *History) faultIn(from, to int64, prefixes []string, load bool, hit func(clients []string) bool) bool {
	for _, d := range h.Disturbances {
		if (load || !d.Load) && d.Start <= to && d.End >= from {
			return true
		}
	}
	for _, f := range h.Faults {
		if hit != nil && !hit(f.Clients) {
			continue
		}
		if len(f.Keys) > 0 && len(prefixes) > 0 && !slices.ContainsFunc(f.Keys, func(k string) bool {
			return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) })
		}) {
			continue
		}
		e := f.End
		if e == 0 {
			e = 1<<63 - 1
		}
		if f.Start <= to && e >= from {
			return true
		}
	}
	return false
}

type marker struct{ put, del int64 }

// lockDelayMarkers are n's lock-delay markers (.../until/<segment>), each
// from its put to its deletion (the lease's expiry on etcd's clock).
func lockDelayMarkers(h *History, n NameInfo) []marker {
	if n.Delay == 0 {
		return nil
	}
	prefix := n.DelayPrefix + "until/"
	open := map[string]int64{}
	var out []marker
	for _, e := range h.Events {
		if !strings.HasPrefix(e.Key, prefix) {
			continue
		}
		if e.Delete {
			if p, ok := open[e.Key]; ok {
				out = append(out, marker{p, e.Rev})
				delete(open, e.Key)
			}
		} else if _, ok := open[e.Key]; !ok {
			open[e.Key] = e.Rev
		}
	}
	for _, p := range open {
		out = append(out, marker{p, 1<<63 - 1})
	}
	return out
}
