package mutex

import (
	"cmp"
	"slices"
)

// Held returns the locks this Mutex holds, in acquisition order: every
// Lock that Lock or TryLock returned and that was not unlocked since,
// including one whose Context a loss has ended (its Unlock is still due).
// It is for inspection, such as a debug endpoint; use a Lock's Context,
// not this list, to decide whether to write.
func (m *Mutex) Held() []*Lock {
	m.mu.Lock()
	out := make([]*Lock, 0, len(m.held))
	for l := range m.held {
		out = append(out, l)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Lock) int { return cmp.Compare(a.Token(), b.Token()) })
	return out
}
