package core

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// A term lost on a borrowed lease that still lives has its key deleted in
// the background. A Campaign through the same lease meanwhile must wait
// for that deletion, not take the key over: the deletion would then end
// the new term at once. Forced: the deletion pauses before its first
// attempt while the second Campaign runs.
func TestCampaignWaitsForTheLostTermsDeletion(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	release, entered := make(chan struct{}), make(chan struct{})
	hooks := &Hooks{BeforeCleanup: func(string) { close(entered); <-release }}
	s, _ := Attach(cs, Config{Hooks: hooks})
	defer s.Detach()
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: keys.Prefix("core-test", keys.Election, "lost-takeover"), NotHeld: errs.ErrReleased,
		Recorder: metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election}})
	defer o.Close()
	h1, err := o.Acquire(ctx, Request{Value: "a"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	h1.l.Lose(errs.ErrValidityExpired) // the watchdog's loss: etcd may still keep the lease
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the lost term's key was not deleted in the background")
	}
	type result struct {
		h   *Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := o.Acquire(ctx, Request{Value: "b"}, func(h *Hold) *Hold { return h })
		got <- result{h, err}
	}()
	select {
	case r := <-got:
		close(release)
		s.dels.Wait()
		if r.err != nil {
			t.Fatalf("the second Campaign failed while the cleanup ran: %v", r.err)
		}
		time.Sleep(100 * time.Millisecond)
		t.Fatalf("a Campaign took over the key the lost term's cleanup was deleting; the cleanup then ended the new term: %v",
			context.Cause(r.h.Context()))
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	s.dels.Wait()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.h.rev == h1.rev {
		t.Fatalf("the new term has the lost term's token %d", r.h.rev)
	}
	time.Sleep(100 * time.Millisecond) // a deletion's news would reach the hold by now
	if err := r.h.Context().Err(); err != nil {
		t.Fatalf("the new term ended: %v", context.Cause(r.h.Context()))
	}
}
