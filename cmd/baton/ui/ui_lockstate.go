package ui

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// Beside the contender keys, the page shows what the lock-delay and the
// release requests keep in etcd, both under the watched namespace:
//
//	/<ns>/v1/delay/<kind>/<escaped name>/until/<segment>/<token>   a running lock-delay,
//	    on a lease of the lost holder's delay (internal/delay)
//	/<ns>/v1/release/<kind>/<escaped name>/<token>         a pending request,
//	    on the holder's lease (internal/request)
//
// and a mutex set's members: the lock keys tagged keys.TagSet that share
// one CreateRevision (one transaction, one token).

// uiDelayRec is one running lock-delay as last seen.
type uiDelayRec struct {
	kind  keys.Kind
	name  string
	lease int64
	rec   delay.Record
}

// uiReleaseRec is one pending release request as last seen.
type uiReleaseRec struct {
	kind  keys.Kind
	name  string
	token int64
	req   request.Request
}

// uiDelay is a running lock-delay as served.
type uiDelay struct {
	// Token is the lost holder's, whose loss started the delay.
	Token   int64 `json:"token"`
	DelayMs int64 `json:"delay_ms"`
	// LeftMs is the time left on etcd's clock (the marker's lease TTL) at
	// the snapshot's time, -1 while not yet read.
	LeftMs int64 `json:"left_ms"`
}

// uiRelease is a pending release request as served. Reason and By are
// the requester's text: the page escapes them like every value.
type uiRelease struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
	At     string `json:"at"`
}

// putLockState records a lock-delay marker or a release request; called
// with mu held. It reports whether key is under either prefix (a delay's
// holder record, which the page does not show, included).
func (s *State) putLockState(key string, value []byte, lease int64) bool {
	if kind, name, rest, ok := keyspace.KindNameAfter(keys.KindPrefix(s.ns, keys.Delay), key); ok || strings.HasPrefix(key, keys.KindPrefix(s.ns, keys.Delay)) {
		var r delay.Record
		if ok && strings.HasPrefix(rest, "until/") && lease != 0 && json.Unmarshal(value, &r) == nil {
			if s.delays == nil {
				s.delays = map[string]*uiDelayRec{}
			}
			s.delays[key] = &uiDelayRec{kind: kind, name: name, lease: lease, rec: r}
			if _, ok := s.leases[lease]; !ok {
				s.leases[lease] = &uiLease{}
			}
		}
		return true
	}
	if kind, name, rest, ok := keyspace.KindNameAfter(keys.KindPrefix(s.ns, request.Release), key); ok || strings.HasPrefix(key, keys.KindPrefix(s.ns, request.Release)) {
		var r request.Request
		token, err := strconv.ParseInt(rest, 10, 64)
		if ok && err == nil && json.Unmarshal(value, &r) == nil {
			if s.releases == nil {
				s.releases = map[string]*uiReleaseRec{}
			}
			s.releases[key] = &uiReleaseRec{kind: kind, name: name, token: token, req: r}
		}
		return true
	}
	return false
}

// deleteLockState forgets a marker or request; called with mu held.
func (s *State) deleteLockState(key string) bool {
	if strings.HasPrefix(key, keys.KindPrefix(s.ns, keys.Delay)) {
		delete(s.delays, key)
		return true
	}
	if strings.HasPrefix(key, keys.KindPrefix(s.ns, request.Release)) {
		delete(s.releases, key)
		return true
	}
	return false
}

// setMembersByToken maps the token of every mutex set seen to its
// members' names, sorted; called with mu held.
func (s *State) setMembersByToken() map[int64][]string {
	sets := map[int64][]string{}
	for _, k := range s.keys {
		if k.kind == keys.Lock && k.tag == keys.TagSet {
			sets[k.create] = append(sets[k.create], k.name)
		}
	}
	for _, names := range sets {
		sort.Strings(names)
	}
	return sets
}

// others is names without name.
func others(names []string, name string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// addLockState adds to o's queue (built from q) the set members and
// pending release requests of its keys, and to o its running lock-delays;
// called with mu held.
func (s *State) addLockState(o *Object, q []*uiKey, sets map[int64][]string, ttl func(lease int64) int64) {
	for i, k := range q {
		if k.tag == keys.TagSet {
			o.Queue[i].Set = others(sets[k.create], k.name)
		}
	}
	for _, r := range s.releases {
		if string(r.kind) != o.Kind || r.name != o.Name {
			continue
		}
		for i := range o.Queue {
			if o.Queue[i].Token == r.token {
				o.Queue[i].Release = &uiRelease{Reason: r.req.Reason, By: r.req.By, At: r.req.At.UTC().Format("2006-01-02T15:04:05Z")}
			}
		}
	}
	for _, d := range s.delays {
		if string(d.kind) == o.Kind && d.name == o.Name {
			o.Delays = append(o.Delays, uiDelay{Token: d.rec.Token, DelayMs: d.rec.DelayMS, LeftMs: ttl(d.lease)})
		}
	}
	sort.Slice(o.Delays, func(i, j int) bool { return o.Delays[i].Token < o.Delays[j].Token })
}

// delayOnlyObjects are the objects with a running lock-delay and no key.
func (s *State) delayOnlyObjects(qs map[string][]*uiKey) []Object {
	seen := map[string]bool{}
	var out []Object
	for _, d := range s.delays {
		id := objID(d.kind, d.name)
		if _, ok := qs[id]; ok || seen[id] {
			continue
		}
		if d.kind == keys.Election && s.hasCand(d.name) {
			continue // shown with its candidates
		}
		seen[id] = true
		out = append(out, Object{Kind: string(d.kind), Name: d.name, Queue: []uiHolder{}})
	}
	return out
}

func (s *State) hasCand(name string) bool {
	for _, c := range s.cands {
		if c.name == name && c.strategy == "preferred" {
			return true
		}
	}
	return false
}
