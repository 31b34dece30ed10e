package core

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/queue"
)

// An enqueue whose reply was lost can be applied by etcd after its cleanup
// read that the key is absent (a proposal committed late, after a leader
// change). The cleanup must void it: the enqueue as it was sent, applied
// once the cleanup is over, must put nothing — else its key, on a lease the
// caller keeps, blocks the name until that lease ends. Forced here: the
// request is built as the enqueue sends it, the cleanup runs as after a
// lost reply (revision unknown), then the request is applied.
func TestEnqueueAppliedAfterItsCleanupPutsNothing(t *testing.T) {
	cli := srv.Client(t)
	ctx := context.Background()
	for _, borrowed := range []bool{true, false} {
		var s *Session
		if borrowed {
			cs, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			s, _ = Attach(cs, Config{})
		} else {
			s = NewSession(cli, Config{TTL: 30 * time.Second})
		}
		prefix := keys.Prefix("core-test", keys.Lock, "late")
		o := NewOwner[*Hold](s, OwnerConfig{Prefix: prefix, Errs: &Errors{NotHeld: errs.ErrReleased}, Own: true,
			Recorder: metrics.Recorder{Logger: zap.NewNop()}})
		l, err := s.Lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		key := keys.LeaseKey(prefix, int64(l.ID()))
		res, err := s.reserve(ctx, key, false, false)
		if err != nil {
			t.Fatal(err)
		}
		sent, _ := queue.EnqueueTxn(ctx, cli, &l.Fence, queue.FenceKey(prefix, l.ID()), l.ID(), key, "late", prefix, nil, nil, false)
		o.deleteKey(l, key, 0, res, nil) // its cleanup, the reply lost
		s.dels.Wait()                    // past cleanupWait on a loaded machine, it goes on in the background
		if r, err := s.reserve(ctx, key, true, false); err != nil {
			t.Fatalf("borrowed %v: the cleanup still holds the key's reservation after it finished: %v", borrowed, err)
		} else {
			s.free(r, nil)
		}

		if _, err := sent.Commit(); err != nil { // etcd applies the enqueue now
			t.Fatal(err)
		}
		g, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) != 0 {
			t.Errorf("borrowed %v: the enqueue applied after its cleanup left key %s (lease %x) in etcd: it blocks the name until the lease ends",
				borrowed, key, g.Kvs[0].Lease)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	}
}

// An enqueue that compared the fence before a cleanup raised it (or whose
// view of the fence is behind) learns the new version and goes in.
func TestEnqueueGoesInAfterTheFenceMoved(t *testing.T) {
	cli := srv.Client(t)
	ctx := context.Background()
	s := NewSession(cli, Config{TTL: 30 * time.Second})
	defer s.Close()
	l, err := s.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := keys.Prefix("core-test", keys.Lock, "moved")
	fkey := queue.FenceKey(prefix, l.ID())
	if err := l.Fence.Raise(ctx, cli, l.ID(), fkey); err != nil {
		t.Fatal(err)
	}
	var behind queue.Fence // still at version 0
	key := keys.LeaseKey(prefix, int64(l.ID()))
	resp, _, err := queue.Enqueue(ctx, cli, nil, &behind, fkey, l.ID(), key, "v", prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Fatalf("the enqueue with a fence view behind did not put its key: %v", resp)
	}
	if _, v := behind.Cmp(fkey); v != 1 {
		t.Errorf("the fence's version after the retry is %d, want 1", v)
	}
	_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
}

// A fence key deleted by hand (an operator's del --prefix of the
// namespace) reads as version 0 again: enqueues compare that and go in,
// instead of retrying on the version they saw before until ctx ends.
func TestEnqueueGoesInAfterTheFenceKeyWasDeleted(t *testing.T) {
	cli := srv.Client(t)
	ctx := context.Background()
	s := NewSession(cli, Config{TTL: 30 * time.Second})
	defer s.Close()
	l, err := s.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := keys.Prefix("core-test", keys.Lock, "fence-deleted")
	fkey := queue.FenceKey(prefix, l.ID())
	if err := l.Fence.Raise(ctx, cli, l.ID(), fkey); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, fkey); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	key := keys.LeaseKey(prefix, int64(l.ID()))
	resp, _, err := queue.Enqueue(ectx, cli, nil, &l.Fence, fkey, l.ID(), key, "v", prefix, nil, nil)
	if err != nil || !resp.Succeeded {
		t.Fatalf("enqueue after the fence key was deleted: %v (succeeded %v)", err, resp != nil && resp.Succeeded)
	}
	_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
}

// An enqueue whose first attempt went unanswered and whose retry was
// refused (its condition failed) must still void the first attempt: it
// may apply once the condition holds. Forced: the first attempt is held
// back by the proxy and its connection dropped (a transient error), the
// retry is refused by a condition that fails; the cleanup raises the fence.
func TestRefusedEnqueueAfterAnUnheardAttemptRaisesTheFence(t *testing.T) {
	cli := srv.Client(t)
	pcli, px := srv.Proxied(t)
	ctx := context.Background()
	s := NewSession(pcli, Config{TTL: 30 * time.Second})
	defer s.Close()
	prefix := keys.Prefix("core-test", keys.Lock, "unheard-refused")
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: prefix, Errs: &Errors{NotHeld: errs.ErrReleased, Busy: errors.New("busy")}, Own: true,
		Recorder: metrics.Recorder{Logger: zap.NewNop()}})
	defer o.Close()
	l, err := s.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flag := prefix + "flag" // absent: the condition fails
	check := func(context.Context) error {
		px.Blackhole() // the enqueue's first attempt is held back ...
		go func() {
			time.Sleep(300 * time.Millisecond)
			px.DropConnections() // ... and its connection lost: unanswered
			px.Restore()
		}()
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = o.Acquire(actx, Request{Value: "v", Check: check, If: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(flag), "!=", 0)}},
		func(h *Hold) *Hold { return h })
	if err == nil {
		t.Fatal("Acquire with a failing condition returned a hold")
	}
	g, err := cli.Get(ctx, queue.FenceKey(prefix, l.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) == 0 || g.Kvs[0].Version < 1 {
		t.Errorf("the refused enqueue, after an unanswered attempt, did not raise its lease's fence: that attempt can still apply once the condition holds")
	}
	_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
}
