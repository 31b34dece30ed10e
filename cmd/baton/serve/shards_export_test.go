package serve

import "testing"

// OnDrainTimedOut sets, until the test ends, a pause point called as a
// moved shard's drain deadline passed unacknowledged, before its lost is
// sent.
func OnDrainTimedOut(t testing.TB, f func(shard int)) {
	drainTimedOutHook.Store(&f)
	t.Cleanup(func() { drainTimedOutHook.Store(nil) })
}
