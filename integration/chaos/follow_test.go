package chaos_test

import (
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// TestFollowerOutlivesABrokenStream: a waiter watches the key ahead on its
// session's watch stream; the stream breaks (a quorum loss: etcd cancels
// the require-leader watches of the member left alone), and the holder
// releases while no stream runs (forced: the quorum comes back and the
// holder unlocks in the stream's StreamEnded hook, before its waiters are
// told). The waiter, told of the break, must read for itself and acquire;
// a waiter left waiting would wait for a deletion no stream will deliver
// (planted bug p).
func TestFollowerOutlivesABrokenStream(t *testing.T) {
	c := cluster.Start(t, 3)
	ctx := ctxTimeout(t, 60*time.Second)
	m0, m1, m2 := c.Member(0), c.Member(1), c.Member(2)
	var (
		once    sync.Once
		waiting = make(chan struct{})
		holder  *mutex.Lock
		broke   = make(chan struct{})
	)
	hooks := &core.Hooks{BeforeWait: func(string) { close(waiting) }}
	hooks.Stream.StreamEnded = func() {
		once.Do(func() {
			close(broke)
			if err := c.Restart(m1, m2); err != nil {
				t.Error(err)
				return
			}
			if _, err := c.WaitLeader(ctx); err != nil {
				t.Error(err)
				return
			}
			if err := holder.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wcli := c.Client(t, m0.Endpoint()) // the member left alone
	sess, err := bsession.New(wcli, config.Hooks(hooks), bsession.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	other, err := mutex.New(wcli, "follow-broken-other", mutex.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Lock(ctx) // the session's watch stream runs from here on
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)

	h, err := mutex.New(c.Client(t), "follow-broken", mutex.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if holder, err = h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := mutex.New(wcli, "follow-broken", mutex.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	type result struct {
		l   *mutex.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := w.Lock(ctx)
		got <- result{l, err}
	}()
	<-waiting
	time.Sleep(200 * time.Millisecond) // watching
	m1.Kill()
	m2.Kill()
	within(t, broke, 20*time.Second, "the stream's break after the quorum loss")
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.l.Token() <= holder.Token() {
			t.Fatalf("token %d after the holder's %d", r.l.Token(), holder.Token())
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never acquired: the holder went while the stream was down")
	}
}
