package scale

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/session"
)

// checkTTL is every config's check of its lease TTL: whole seconds, and at
// least session.MinTTL. phase names the config in the error; nil if ttl
// passes (errors.Join drops it).
func checkTTL(phase string, ttl time.Duration) error {
	if ttl < session.MinTTL || ttl%time.Second != 0 {
		return fmt.Errorf("%s: TTL must be whole seconds and at least %v, got %v", phase, session.MinTTL, ttl)
	}
	return nil
}

// checkDeadline is every config's check of its Deadline: positive.
func checkDeadline(phase string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: Deadline must be positive, got %v", phase, d)
	}
	return nil
}
