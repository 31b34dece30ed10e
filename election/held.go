package election

// Held returns the terms this Election holds, in the order they were
// won: every Term that Campaign returned and that was not resigned since,
// including one whose Context a loss has ended (its Resign is still due).
// It is for inspection, such as a debug endpoint; use a Term's Context,
// not this list, to decide whether to act as leader.
func (e *Election) Held() []*Term { return e.owner.Held() }
