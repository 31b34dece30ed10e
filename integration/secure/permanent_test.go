package secure_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
)

// A "permission denied" is returned at once by Lock, TryLock, Campaign and
// Run, wedges nothing (the next call is refused the same way, not told
// ErrLocked or left waiting), and ends Observe with the error.
func TestPermissionDeniedIsReturnedAtOnceAndWedgesNothing(t *testing.T) {
	ops := clientOf(t, payOps) // may read payments, not write
	m := newMutex(t, ops, "payments", "denied")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		_, lerr := m.Lock(ctx)
		_, terr := m.TryLock(ctx)
		cancel()
		if !isDenied(lerr) || !isDenied(terr) {
			t.Fatalf("call %d: Lock = %v, TryLock = %v; want permission denied from both", i, lerr, terr)
		}
		if errors.Is(terr, mutex.ErrLocked) {
			t.Fatalf("call %d: TryLock says ErrLocked after a refusal", i)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("call %d: refusals took %v (retried, or waited for a reservation)", i, d)
		}
	}
	e := newElection(t, ops, "payments", "denied")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := e.Run(ctx, "ops", func(context.Context, *election.Term) error { return nil })
	if !isDenied(err) || time.Since(start) > time.Second {
		t.Fatalf("Run = %v after %v, want permission denied at once", err, time.Since(start))
	}
	if _, err := e.Campaign(ctx, "ops"); !isDenied(err) {
		t.Fatalf("Campaign after Run = %v", err)
	}

	// A user of no role cannot even read: Observe ends with the error.
	other := newElection(t, clientOf(t, jobsApp), "payments", "denied")
	var last election.Leader
	n := 0
	for l := range other.Observe(ctx) {
		last, n = l, n+1
	}
	if ctx.Err() != nil {
		t.Fatal("Observe did not end on a refusal")
	}
	if n != 1 || !isDenied(last.Err) {
		t.Fatalf("Observe sent %d values, last %+v; want one with the refusal", n, last)
	}
}
