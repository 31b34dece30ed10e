package election_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
)

// A preferred election's hand-overs bypass the lock-delay record, so the
// two options together are refused, never silently half-applied.
func TestLockDelayWithPreferredStrategyIsRefused(t *testing.T) {
	cli := client(t)
	e, err := election.New(cli, "delay-preferred", election.WithLockDelay(3*time.Second), election.WithStrategy(election.Preferred))
	if err == nil {
		_ = e.Close()
		t.Fatal("New with WithLockDelay and WithStrategy(Preferred) succeeded; the delay would be ignored")
	}
	if !errors.Is(err, election.ErrInvalid) || !strings.Contains(err.Error(), "WithLockDelay") {
		t.Fatalf("New = %v, want ErrInvalid naming WithLockDelay", err)
	}
	e, err = election.New(cli, "delay-oldest", election.WithLockDelay(3*time.Second))
	if err != nil {
		t.Fatalf("WithLockDelay under the default strategy: %v", err)
	}
	_ = e.Close()
}
