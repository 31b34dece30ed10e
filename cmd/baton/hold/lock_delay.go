package hold

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// addLockDelayFlag is --lock-delay of lock and elect.
func addLockDelayFlag(f *pflag.FlagSet, d *time.Duration) {
	f.DurationVar(d, "lock-delay", 0, "after a holder is lost without releasing (lease expired or revoked, key force-deleted), acquire no sooner than its delay later, timed by etcd: 0 (none) or whole seconds from 2s to 1h")
}

// validateLockDelay refuses a --lock-delay etcd cannot time, before
// connecting.
func validateLockDelay(d time.Duration) error {
	if d != 0 && (d < 2*time.Second || d > time.Hour || d%time.Second != 0) {
		return cmdutil.UsageErrorf("--lock-delay %v: 0 (none) or whole seconds from 2s to 1h (a lease's TTL)", d)
	}
	return nil
}
