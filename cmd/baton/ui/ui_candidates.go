package ui

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/batonhq/baton/internal/keys"
)

// An election's candidates say who they are in records beside its keys,
// /<ns>/v1/candidate/<escaped name>/<strategy>/<lease hex> (package
// election): the page shows their priority, version and strategy, and the
// candidates of a preferred-strategy election that wait without a key.

// uiCand is one candidate record as last seen.
type uiCand struct {
	name     string
	strategy string
	lease    int64
	create   int64
	Value    string `json:"value"`
	Priority int    `json:"priority"`
	Version  string `json:"version"`
}

// candRecord parses a candidate record; ok is false for any other key.
func (s *State) candRecord(key string, value []byte) (c *uiCand, ok bool) {
	rest, found := strings.CutPrefix(key, keys.NamespacePrefix(s.ns)+"candidate/")
	if !found {
		return nil, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || (parts[1] != "oldest" && parts[1] != "preferred") {
		return nil, true // an end request, or not baton's: no candidate
	}
	name, err := keys.Unescape(parts[0])
	lease, lerr := strconv.ParseInt(parts[2], 16, 64)
	if err != nil || lerr != nil {
		return nil, true
	}
	c = &uiCand{name: name, strategy: parts[1], lease: lease}
	if value != nil && json.Unmarshal(value, c) != nil {
		return nil, true
	}
	return c, true
}

// putCand records a candidate record; called with mu held. It reports
// whether key is one (or another key under the candidate prefix).
func (s *State) putCand(key string, value []byte, create int64) bool {
	c, ok := s.candRecord(key, value)
	if c != nil {
		c.create = create
		if s.cands == nil {
			s.cands = map[string]*uiCand{}
		}
		s.cands[key] = c
		if _, ok := s.leases[c.lease]; !ok {
			s.leases[c.lease] = &uiLease{}
		}
	}
	return ok
}

// deleteCand forgets a candidate record; called with mu held.
func (s *State) deleteCand(key string) bool {
	if _, ok := s.candRecord(key, nil); !ok {
		return false
	}
	delete(s.cands, key)
	return true
}

// candidates adds the records' attributes to an election's queue, and its
// preferred candidates that wait without a key; called with mu held.
func (s *State) candidates(o *Object, q []*uiKey, holder func(lease int64) uiHolder) {
	byLease := map[int64]*uiCand{}
	var waiting []*uiCand
	for _, c := range s.cands {
		if c.name != o.Name {
			continue
		}
		byLease[c.lease] = c
		if c.strategy == "preferred" {
			o.Strategy = "preferred"
		}
	}
	if o.Strategy == "" {
		o.Strategy = "oldest"
	}
	keyed := map[int64]bool{}
	for i, k := range q {
		keyed[k.lease] = true
		if c := byLease[k.lease]; c != nil {
			o.Queue[i].Priority, o.Queue[i].Version = c.Priority, c.Version
		}
	}
	for _, c := range byLease {
		if !keyed[c.lease] && c.strategy == "preferred" {
			waiting = append(waiting, c)
		}
	}
	sort.Slice(waiting, func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.create < b.create
	})
	for _, c := range waiting {
		h := holder(c.lease)
		h.Value, h.Priority, h.Version = c.Value, c.Priority, c.Version
		o.Queue = append(o.Queue, h)
		o.Waiters++
	}
}

// electionNames are the elections with a candidate record but no key.
func (s *State) candOnlyNames(qs map[string][]*uiKey) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range s.cands {
		if _, ok := qs[objID(keys.Election, c.name)]; !ok && c.strategy == "preferred" && !seen[c.name] {
			seen[c.name] = true
			out = append(out, c.name)
		}
	}
	return out
}
