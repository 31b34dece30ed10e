package election

import (
	"cmp"
	"slices"
)

// Held returns the terms this Election holds, in the order they were
// won: every Term that Campaign returned and that was not resigned since,
// including one whose Context a loss has ended (its Resign is still due).
// It is for inspection, such as a debug endpoint; use a Term's Context,
// not this list, to decide whether to act as leader.
func (e *Election) Held() []*Term {
	e.mu.Lock()
	out := make([]*Term, 0, len(e.terms))
	for t := range e.terms {
		out = append(out, t)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b *Term) int { return cmp.Compare(a.Token(), b.Token()) })
	return out
}
