package core

import (
	"context"
	"sync"
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
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: keys.Prefix("core-test", keys.Election, "lost-takeover"), Errs: &Errors{NotHeld: errs.ErrReleased},
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

// As above, but the second Campaign comes after the loss ended the term's
// context and before the term's end hooks ran (paused in EndingHolds): a
// term that ended is not taken over either, and its cleanup leaves the new
// term's key and reservation alone.
func TestCampaignDoesNotTakeOverATermWhoseEndIsPending(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	endRelease, cleanRelease := make(chan struct{}), make(chan struct{})
	var endOnce, cleanOnce sync.Once
	hooks := &Hooks{
		EndingHolds:   func() { endOnce.Do(func() { <-endRelease }) },
		BeforeCleanup: func(string) { cleanOnce.Do(func() { <-cleanRelease }) },
	}
	s, _ := Attach(cs, Config{Hooks: hooks})
	defer s.Detach()
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: keys.Prefix("core-test", keys.Election, "lost-takeover-race"), Errs: &Errors{NotHeld: errs.ErrReleased},
		Recorder: metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election}})
	defer o.Close()
	h1, err := o.Acquire(ctx, Request{Value: "a"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	h1.l.Lose(errs.ErrValidityExpired) // h1's context ends now; its end waits in EndingHolds
	time.AfterFunc(300*time.Millisecond, func() { close(endRelease) })
	time.AfterFunc(600*time.Millisecond, func() { close(cleanRelease) })
	h2, err := o.Acquire(ctx, Request{Value: "b"}, func(h *Hold) *Hold { return h })
	s.dels.Wait()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	s.mu.Lock()
	kept := s.reserved[h2.key] == h2.res && h2.res.key != ""
	s.mu.Unlock()
	if h2.rev == h1.rev {
		t.Errorf("the new term adopted the lost term's key (token %d)", h2.rev)
	}
	if err := h2.Context().Err(); err != nil {
		t.Errorf("the new term ended: %v", context.Cause(h2.Context()))
	}
	if !kept {
		t.Errorf("the lost term's cleanup freed the reservation the new term holds")
	}
}

// Without a cleanup pause: were the lost term taken over, its deletion would
// free the reservation the takeover got, and a third Campaign would reserve
// the key afresh and adopt it: two live terms on one token.
func TestNoTwoLiveTermsAfterACampaignDuringALoss(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	endRelease := make(chan struct{})
	var endOnce sync.Once
	hooks := &Hooks{EndingHolds: func() { endOnce.Do(func() { <-endRelease }) }}
	s, _ := Attach(cs, Config{Hooks: hooks})
	defer s.Detach()
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: keys.Prefix("core-test", keys.Election, "lost-takeover-race2"), Errs: &Errors{NotHeld: errs.ErrReleased},
		Recorder: metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election}})
	defer o.Close()
	h1, err := o.Acquire(ctx, Request{Value: "a"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	h1.l.Lose(errs.ErrValidityExpired)
	time.AfterFunc(300*time.Millisecond, func() { close(endRelease) })
	h2, err := o.Acquire(ctx, Request{Value: "b"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	s.dels.Wait()
	h3, err := o.Acquire(ctx, Request{Value: "c"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if h2.Context().Err() == nil && h3.Context().Err() == nil {
		t.Fatalf("two live terms on one key: h2 token %d, h3 token %d", h2.rev, h3.rev)
	}
}

// No hooks: an operator deletes the term's key on a borrowed lease; the
// term's context ends at once and its end waits for a round trip that
// tells a deleted key from an expired lease (slowed by the proxy). A
// Campaign meanwhile must not take the ended term over.
func TestNoTwoLiveTermsAfterACampaignDuringAKeyDeletion(t *testing.T) {
	cli := srv.Client(t)
	pcli, px := srv.Proxied(t)
	cs, err := concurrency.NewSession(pcli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	s, _ := Attach(cs, Config{})
	defer s.Detach()
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: keys.Prefix("core-test", keys.Election, "lost-takeover-race3"), Errs: &Errors{NotHeld: errs.ErrReleased},
		Recorder: metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election}})
	defer o.Close()
	h1, err := o.Acquire(ctx, Request{Value: "a"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	px.SetDelay(150 * time.Millisecond)
	if _, err := cli.Delete(ctx, h1.key); err != nil { // an operator's delete
		t.Fatal(err)
	}
	<-h1.Done()
	h2, err := o.Acquire(ctx, Request{Value: "b"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	px.SetDelay(0)
	s.dels.Wait()
	h3, err := o.Acquire(ctx, Request{Value: "c"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if h2.Context().Err() == nil && h3.Context().Err() == nil {
		t.Fatalf("two live terms on one key: h2 token %d, h3 token %d (h1 ended: %v)", h2.rev, h3.rev, context.Cause(h1.Context()))
	}
}
