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

// A deletion left running by the last primitive on an etcd session (a lost
// enqueue reply: revision unknown) must not delete the key that a primitive
// attached to the same etcd session afterwards holds under the same name.
func TestDeletionOfADetachedSessionSparesTheNextSessionsHolder(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	prefix := "/core-test/v1/lock/drain/"
	ocfg := OwnerConfig{Prefix: prefix, Errs: &Errors{NotHeld: errs.ErrReleased}, Own: true, Recorder: metrics.Recorder{Logger: zap.NewNop()}}

	release, entered := make(chan struct{}), make(chan struct{})
	hooks := &Hooks{BeforeCleanup: func(string) { close(entered); <-release }}
	s1, _ := Attach(cs, Config{Hooks: hooks})
	o1 := NewOwner[*Hold](s1, ocfg)
	l, err := s1.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := keys.LeaseKey(prefix, int64(l.ID()))
	res, err := s1.reserve(ctx, key, false, false)
	if err != nil {
		t.Fatal(err)
	}
	o1.deleteKey(l, key, 0, res, nil) // as after an enqueue whose reply was lost
	<-entered
	if err := o1.Close(); err != nil { // the last use: the Session is detached and closed
		t.Fatal(err)
	}

	s2, created := Attach(cs, Config{})
	if !created {
		t.Fatal("Attach after the last Detach returned the closed Session")
	}
	o2 := NewOwner[*Hold](s2, ocfg)
	defer o2.Close()
	type result struct {
		h   *Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := o2.Acquire(ctx, Request{Value: "b"}, func(h *Hold) *Hold { return h })
		got <- result{h, err}
	}()
	// Let the old deletion go once the new Acquire returned or waits for it.
	var r result
	returned := false
	for i := 0; i < 500 && !returned; i++ {
		s1.mu.Lock()
		waiting := res.freed != nil
		s1.mu.Unlock()
		if waiting {
			break
		}
		select {
		case r = <-got:
			returned = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(release)
	s1.dels.Wait()
	if !returned {
		r = <-got
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	g, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 1 || r.h.Context().Err() != nil {
		t.Fatalf("the old Session's deletion removed the new holder's key %s (left %d keys, holder's context: %v)", key, len(g.Kvs), context.Cause(r.h.Context()))
	}
	attached.Lock()
	n := len(attached.draining)
	attached.Unlock()
	if n != 0 {
		t.Fatalf("%d draining registry entries left after the deletion ended", n)
	}
}
