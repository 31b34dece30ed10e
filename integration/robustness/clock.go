package robustness

import (
	"sync"
	"time"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/lease"

	"golang.org/x/sys/unix"
)

// now is CLOCK_MONOTONIC in nanoseconds: one clock for this process and
// its children, so that their calls and returns order against each other
// (Go's own monotonic readings are relative to each process's start).
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("robustness: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// since formats a clock reading relative to a run's start.
func since(start, t int64) string {
	return time.Duration(t - start).Round(time.Millisecond).String()
}

// skewClock is a lease watchdog's clock that runs at rate times real
// time and jumps forward when told: the clock-skew fault's. Rates down
// to 0.8 are within what the default safety margin (a fifth of the TTL)
// promises to cover; a monotonic clock never goes back.
type skewClock struct {
	name string

	mu   sync.Mutex
	base time.Time // real time of the last change
	virt time.Time // this clock's reading then
	rate float64
}

func newSkewClock(name string) *skewClock {
	t := time.Now()
	return &skewClock{name: name, base: t, virt: t, rate: 1}
}

// String names the clock: a session's options are compared as text.
func (c *skewClock) String() string { return "skew clock " + c.name }

func (c *skewClock) option() config.Option { return config.Clock(c) }

func (c *skewClock) nowLocked() time.Time {
	return c.virt.Add(time.Duration(float64(time.Since(c.base)) * c.rate))
}

// Now implements lease.Clock.
func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

// AfterFunc implements lease.Clock: d on this clock is d/rate of real
// time (a jump meanwhile does not advance a pending call, which then
// fires late for this clock: the lease re-checks Now when it fires).
func (c *skewClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	r := c.rate
	c.mu.Unlock()
	return time.AfterFunc(time.Duration(float64(d)/r), f)
}

// set changes the rate from now on.
func (c *skewClock) set(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.virt, c.base, c.rate = c.nowLocked(), time.Now(), rate
}

// jump moves the clock forward by d.
func (c *skewClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.virt, c.base = c.nowLocked().Add(d), time.Now()
}
