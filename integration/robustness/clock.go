package robustness

import (
	"time"

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
