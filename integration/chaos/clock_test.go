package chaos_test

import (
	"time"

	"github.com/batonhq/baton/internal/lease"
)

// slowClock runs at factor times real speed (0.5: half speed) from the
// moment it is made: its timers fire late and its deadlines are far.
type slowClock struct {
	origin time.Time
	factor float64
}

func newSlowClock(factor float64) slowClock { return slowClock{origin: time.Now(), factor: factor} }

func (c slowClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.origin)) * c.factor))
}

func (c slowClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	return time.AfterFunc(time.Duration(float64(d)/c.factor), f)
}

// frozenClock never advances: a timer set for any time ahead never
// fires, so the watchdog neither renews nor declares the lease expired.
type frozenClock struct{ at time.Time }

func (c frozenClock) Now() time.Time { return c.at }

func (c frozenClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	if d <= 0 {
		return time.AfterFunc(0, f)
	}
	return neverTimer{}
}

type neverTimer struct{}

func (neverTimer) Stop() bool { return true }
