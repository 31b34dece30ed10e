package router

import (
	"errors"
	"fmt"
	"slices"

	"github.com/batonhq/baton/fencing"
)

// RevisionBits is how many low bits of a composed token hold the etcd
// revision; the 16 bits above them hold the cluster's epoch. 2^47
// revisions is about 445 years at 10,000 writes/s.
const RevisionBits = 47

// Token composes a fencing token from a cluster's epoch and a token the
// cluster issued (mutex.Lock.Token, election.Term.Token): epoch<<47 |
// token. With epoch 0 it is the token itself. The result orders first by
// epoch, then by revision, so every guard of package fencing keeps
// rejecting stale holders across a namespace's move to a cluster with a
// greater epoch, whose own revisions restart low. It fails with
// ErrTokenRange for a token that is not positive or does not fit 47 bits.
func Token(epoch uint16, t fencing.Token) (fencing.Token, error) {
	if t <= 0 || t >= 1<<RevisionBits {
		return 0, fmt.Errorf("%w: %d is not in 1..2^%d-1", ErrTokenRange, int64(t), RevisionBits)
	}
	return fencing.Token(int64(epoch)<<RevisionBits | int64(t)), nil
}

// SplitToken is the inverse of Token.
func SplitToken(t fencing.Token) (epoch uint16, revision fencing.Token) {
	return uint16(int64(t) >> RevisionBits), t & (1<<RevisionBits - 1)
}

// Token composes the fencing token of a holder in namespace ns from the
// token its cluster issued, with the epoch of the cluster that serves ns
// in this map (see Token). A holder must compose with the map it acquired
// under: a Router loaded after a move gives the new cluster's epoch.
func (r *Router) Token(ns string, t fencing.Token) (fencing.Token, error) {
	i, err := r.route(ns)
	if err != nil {
		return 0, err
	}
	return Token(r.m.Clusters[i].Epoch, t)
}

// CheckMove reports whether next may replace prev without fencing tokens
// going backwards. It follows each namespace either map lists or retires,
// and the default (for the namespaces served without being listed), from
// what served it in prev to what serves it in next:
//
//   - to another etcd cluster, the epoch must be greater. Clusters are
//     told apart by their pinned identity (Cluster.ID) when both maps pin
//     one, by name otherwise: a name whose ID changes is another cluster;
//   - on the same cluster, the epoch must not go down;
//   - a pin must not be dropped: a cluster that prev pins and next does
//     not cannot be compared;
//   - a namespace (or the default) next no longer serves must be kept in
//     next's Retired with the cluster and an epoch at least that of the
//     cluster that served it; a retired one must stay retired until it is
//     served again, and then (the whole history the maps carry) the rule
//     above applies between its retired record and its new cluster.
//
// Every offence is reported, joined, each wrapping ErrEpochOrder. It reads
// the maps only: that the pins are those of the clusters behind the
// endpoints is checked by the Router when it connects (and by `baton
// clusters check-move`, which connects).
func CheckMove(prev, next Map) error {
	pr, err := New(prev)
	if err != nil {
		return fmt.Errorf("previous map: %w", err)
	}
	defer pr.Close()
	nr, err := New(next)
	if err != nil {
		return fmt.Errorf("next map: %w", err)
	}
	defer nr.Close()
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrEpochOrder}, args...)...))
	}
	nss := slices.Concat(pr.Namespaces(), nr.Namespaces())
	for _, m := range []Map{prev, next} {
		for _, r := range m.Retired {
			if !r.Default {
				nss = append(nss, r.Namespace)
			}
		}
	}
	slices.Sort(nss)
	nss = slices.Compact(nss)
	for _, ns := range nss {
		a, b := stateOf(pr, prev, ns), stateOf(nr, next, ns)
		checkStep(fmt.Sprintf("namespace %q", ns), a, b, bad)
	}
	checkStep("the default", stateOf(pr, prev, ""), stateOf(nr, next, ""), bad)
	return errors.Join(problems...)
}

// served is what serves a namespace (or the default) in a map: a cluster
// (live), a retired record, or nothing.
type served struct {
	known   bool
	live    bool
	cluster string
	id      string
	epoch   uint16
}

func (s served) String() string {
	id := ""
	if s.id != "" {
		id = ", etcd cluster " + s.id
	}
	state := ""
	if !s.live {
		state = "retired from "
	}
	return fmt.Sprintf("%scluster %q (epoch %d%s)", state, s.cluster, s.epoch, id)
}

// stateOf is what serves ns in m ("" for the default): its cluster, else
// its retired record, else the retired default (which may have served it
// without listing it).
func stateOf(r *Router, m Map, ns string) served {
	if ns == "" {
		if r.dflt >= 0 {
			c := r.m.Clusters[r.dflt]
			return served{known: true, live: true, cluster: c.Name, id: canonID(c.ID), epoch: c.Epoch}
		}
	} else if i, err := r.route(ns); err == nil {
		c := r.m.Clusters[i]
		return served{known: true, live: true, cluster: c.Name, id: canonID(c.ID), epoch: c.Epoch}
	}
	if rt, ok := retiredOf(m, ns); ok {
		return served{known: true, cluster: rt.Cluster, id: canonID(rt.ID), epoch: rt.Epoch}
	}
	if rt, ok := retiredOf(m, ""); ok && ns != "" {
		return served{known: true, cluster: rt.Cluster, id: canonID(rt.ID), epoch: rt.Epoch}
	}
	return served{}
}

// canonID is a pinned ID in the form FormatClusterID writes, so that
// two spellings of one ID compare equal.
func canonID(s string) string {
	if id, err := ParseClusterID(s); err == nil {
		return FormatClusterID(id)
	}
	return s
}

// retiredOf is m's own retired record of ns ("" for the default).
func retiredOf(m Map, ns string) (Retired, bool) {
	for _, r := range m.Retired {
		if r.Default == (ns == "") && r.Namespace == ns {
			return r, true
		}
	}
	return Retired{}, false
}

// checkStep orders one namespace's (or the default's) step from a to b.
func checkStep(what string, a, b served, bad func(string, ...any)) {
	switch {
	case !a.known:
		return // new: nothing to order
	case !b.known && a.live:
		bad("%s is no longer served (it was on %s): add it to the next map's retired list with cluster %q and epoch %d, so that it is never served again at a lower epoch",
			what, a, a.cluster, a.epoch)
		return
	case !b.known:
		bad("%s was %s, and the next map drops that record: keep it until the namespace is served again", what, a)
		return
	case !b.live:
		if b.epoch < a.epoch {
			bad("%s is %s, below the epoch %d of %s", what, b, a.epoch, a)
		}
		return
	case a.id != "" && b.id == "" && a.cluster == b.cluster:
		bad("%s stays on cluster %q, which no longer pins its identity (it pinned %s): pin it (baton clusters pin) so that a repointed name is caught",
			what, b.cluster, a.id)
		return
	}
	same := a.cluster == b.cluster
	if a.id != "" && b.id != "" {
		same = a.id == b.id
	}
	switch {
	case !same && b.epoch <= a.epoch:
		why := ""
		if a.cluster == b.cluster {
			why = fmt.Sprintf(" (the name %q now means another etcd cluster)", b.cluster)
		}
		bad("%s moves from %s to %s%s: the new epoch must be greater than %d", what, a, b, why, a.epoch)
	case same && b.epoch < a.epoch:
		bad("%s stays on cluster %q whose epoch goes down from %d to %d", what, b.cluster, a.epoch, b.epoch)
	}
}
