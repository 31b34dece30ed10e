package cmdutil

import (
	"context"
	"time"
)

// WaitBackoff is the pause before another attempt: 100 ms doubling to 2 s,
// short enough that an outage's end is noticed well within a TTL.
func WaitBackoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
}

func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
