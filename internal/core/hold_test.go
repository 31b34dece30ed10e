package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/metrics"
)

// A hold is not a child of its lease's context; a lease lost between the
// acquisition's confirmation and the hold's arming must still hand back a
// hold whose Context has ended, with the lease's cause, before the caller
// sees it.
func TestHoldOnALeaseLostBeforeArmIsEndedWhenReturned(t *testing.T) {
	cli := srv.Client(t)
	hooks := &Hooks{}
	s := NewSession(cli, Config{TTL: 5 * time.Second, Hooks: hooks})
	defer s.Close()
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: "/core-test/v1/lock/lost-before-arm/", Errs: &Errors{NotHeld: errs.ErrReleased}, Recorder: metrics.Recorder{Logger: zap.NewNop()}})
	defer o.Close()
	hooks.BeforeArm = func(string) {
		s.mu.Lock()
		l := s.cur
		s.mu.Unlock()
		l.Lose(errs.ErrLeaseExpired)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := o.Acquire(ctx, Request{Value: "v"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if h.Context().Err() == nil {
		t.Fatal("the hold's Context was live when returned on a lost lease")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, errs.ErrLeaseExpired) {
		t.Fatalf("cause %v, want ErrLeaseExpired", cause)
	}
}
