package lease

import "time"

// Clock is the time source of the validity watchdog: Go's monotonic clock,
// or a slow or frozen one in tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this clock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// RealClock is the monotonic wall clock.
type RealClock struct{}

// Now returns time.Now, which carries a monotonic reading.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
