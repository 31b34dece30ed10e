package router

import (
	"errors"
	"fmt"

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
// going backwards: every namespace that prev serves and next serves from
// another cluster (by name) must find there a greater epoch, and a
// cluster that keeps a namespace must not lower its epoch. Namespaces
// served through a default count too, for the namespaces either map
// lists; a change of default cluster needs a greater epoch as well. Every
// offence is reported, joined, each wrapping ErrEpochOrder.
func CheckMove(prev, next Map) error {
	var problems []error
	pr, err := New(prev)
	if err != nil {
		return fmt.Errorf("previous map: %w", err)
	}
	nr, err := New(next)
	if err != nil {
		return fmt.Errorf("next map: %w", err)
	}
	seen := map[string]bool{}
	check := func(ns, what string) {
		if seen[ns] {
			return
		}
		seen[ns] = true
		a, errA := pr.Cluster(ns)
		b, errB := nr.Cluster(ns)
		if errA != nil || errB != nil {
			return // served by only one of the maps: nothing to order
		}
		switch {
		case a.Name != b.Name && b.Epoch <= a.Epoch:
			problems = append(problems, fmt.Errorf("%w: %s moves from cluster %q (epoch %d) to %q (epoch %d): the new epoch must be greater",
				ErrEpochOrder, what, a.Name, a.Epoch, b.Name, b.Epoch))
		case a.Name == b.Name && b.Epoch < a.Epoch:
			problems = append(problems, fmt.Errorf("%w: %s stays on cluster %q whose epoch goes down from %d to %d",
				ErrEpochOrder, what, a.Name, a.Epoch, b.Epoch))
		}
	}
	for _, ns := range pr.Namespaces() {
		check(ns, fmt.Sprintf("namespace %q", ns))
	}
	for _, ns := range nr.Namespaces() {
		check(ns, fmt.Sprintf("namespace %q", ns))
	}
	if prev.Default != "" && next.Default != "" {
		a, b := pr.m.Clusters[pr.dflt], nr.m.Clusters[nr.dflt]
		if a.Name != b.Name && b.Epoch <= a.Epoch {
			problems = append(problems, fmt.Errorf("%w: the default moves from cluster %q (epoch %d) to %q (epoch %d): the new epoch must be greater",
				ErrEpochOrder, a.Name, a.Epoch, b.Name, b.Epoch))
		} else if a.Name == b.Name && b.Epoch < a.Epoch {
			problems = append(problems, fmt.Errorf("%w: the default cluster %q's epoch goes down from %d to %d",
				ErrEpochOrder, a.Name, a.Epoch, b.Epoch))
		}
	}
	_ = pr.Close()
	_ = nr.Close()
	return errors.Join(problems...)
}
