package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Holds released while their lost lease ends them: the end runs once, and
// a Release that comes second waits for it (it reads the cause the end
// told apart) as sync.Once's second caller did; run with -race (the
// robustness suite found a release reading the cause as the lease's end
// wrote it).
func TestReleaseWhileTheLeaseEndsItsHoldsWaitsForTheEnd(t *testing.T) {
	cli := srv.Client(t)
	s := NewSession(cli, Config{TTL: 5 * time.Second})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var holds []*Hold
	var owners []*Owner[*Hold]
	for i := range 20 {
		o := NewOwner[*Hold](s, OwnerConfig{Prefix: fmt.Sprintf("/core-test/v1/lock/release-lost-%d/", i), Errs: &Errors{NotHeld: errs.ErrReleased}, Recorder: metrics.Recorder{Logger: zap.NewNop()}})
		defer o.Close()
		h, err := o.Acquire(ctx, Request{Value: "v"}, func(h *Hold) *Hold { return h })
		if err != nil {
			t.Fatal(err)
		}
		holds, owners = append(holds, h), append(owners, o)
	}
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	l.Lose(errs.ErrLeaseExpired)
	var wg sync.WaitGroup
	for _, h := range holds {
		wg.Go(func() {
			if err := Release(ctx, h); !errors.Is(err, errs.ErrLeaseExpired) {
				t.Errorf("Release of a hold on a lost lease = %v, want its loss", err)
			}
		})
	}
	wg.Wait()
}
