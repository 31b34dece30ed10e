package election

// SetHandOverHook makes f run in a hand-over (Transfer, Resign under
// Preferred, Run's hand-over) after the target was checked and before the
// transaction; set before the Election is used.
func SetHandOverHook(e *Election, f func(to string)) { e.hooks.beforeHandOver = f }

// SetPreemptHook makes f run before a candidate deletes the leader's key
// at the end of its hand-over deadline.
func SetPreemptHook(e *Election, f func()) { e.hooks.onPreempt = f }
