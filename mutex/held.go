package mutex

// Held returns the locks this Mutex holds, in acquisition order: every
// Lock that Lock or TryLock returned and that was not unlocked since,
// including one whose Context a loss has ended (its Unlock is still due).
// It is for inspection, such as a debug endpoint; use a Lock's Context,
// not this list, to decide whether to write.
func (m *Mutex) Held() []*Lock { return m.owner.Held() }
