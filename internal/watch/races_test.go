package watch

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
)

// Steps of the stream forced by its hooks, each a race that once lost a
// deletion or a watch.

// deliveredOf counts the deletions of key the stream delivered.
func (r *rig) deliveredOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.deleted {
		if k == r.prefix+key {
			n++
		}
	}
	return n
}

// A hold released while a new stream's creates wait to go out: its cancel
// must not go before its create (etcd ignores a cancel of a watch it does
// not know, then runs the create for ever). The sentinel's later deletion,
// delivered in revision order, proves the released key's was not.
func TestAHoldReleasedBeforeItsCreateWentOutLeavesNoWatch(t *testing.T) {
	r := newRig(t)
	h := r.hold("a")
	r.hold("sentinel") // stays held: the stream stays up
	r.covered()
	gate, in := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.s.c.Hooks.Established = func() { once.Do(func() { close(in); <-gate }) }
	r.s.Reset()
	etcdtest.Within(t, in, 5*time.Second, "the next stream")
	r.s.Unregister(h, h.id) // its create waits in publish
	close(gate)
	r.covered()
	r.del("a")
	r.del("sentinel")
	r.delivered("sentinel", 1)
	if n := r.deliveredOf("a"); n > 0 {
		t.Fatalf("the released key's deletion was delivered %d times: its watch outlived its release", n)
	}
}

// A waiter's own key deleted between its enqueue and its Follow: the
// waiter is told at Follow.
func TestAWaiterIsToldOfItsOwnKeyGoneBeforeItFollowed(t *testing.T) {
	r := newRig(t)
	r.put("blocker")
	own := r.prefix + "own"
	id := r.s.Expect(own)
	r.put("own")
	r.covered()
	r.del("own")
	r.delivered("own", 1)
	var mu sync.Mutex
	var notes []Note
	stop := r.s.Follow(id, []string{r.prefix + "blocker"}, func(n Note) { mu.Lock(); notes = append(notes, n); mu.Unlock() })
	defer stop()
	defer r.s.Unexpect(id)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range notes {
		if n.Kind == Deleted && n.Key == own {
			return
		}
	}
	t.Fatalf("the waiter was not told its own key went before it followed: %+v", notes)
}

// A gap read in flight when the stream breaks again: the next stream's
// checks get a reader of their own, so a deletion made while no stream ran
// still ends its hold.
func TestAGapReadCutByASecondBreakLeavesNoHoldUntold(t *testing.T) {
	r := newRig(t)
	h := r.hold("a")
	r.hold("b")
	r.covered()
	gate, in := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.mu.Lock()
	r.reread = func() { once.Do(func() { close(in); <-gate }) }
	r.mu.Unlock()
	r.s.Reset() // the next stream reads a's gap: its reader waits in the hook
	etcdtest.Within(t, in, 5*time.Second, "the gap read")
	r.s.mu.Lock()
	second := r.s.conn // the stream the waiting reader reads for
	r.s.mu.Unlock()
	ended, release := r.holdStreamEnd()
	r.s.Reset()
	etcdtest.Within(t, ended, 5*time.Second, "the second stream's end")
	r.del("a") // while no stream runs
	release()
	deadline := time.Now().Add(5 * time.Second)
	for { // the third stream is up, a's create answered, its check queued
		r.s.mu.Lock()
		n, c := len(r.s.checks), r.s.conn
		r.s.mu.Unlock()
		if n > 0 && c != nil && c != second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no check queued on the third stream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	etcdtest.Within(t, h.gone, 5*time.Second, "the hold's end (its key went while no stream ran)")
}

// An operator's range delete of many held keys keeps at most maxLinger of
// their watches, and ends the others.
func TestHeldKeysDeletedKeepAtMostMaxLingerWatches(t *testing.T) {
	r := newRig(t)
	r.hold("sentinel")
	var hs []*hold
	for i := range maxLinger + 36 {
		hs = append(hs, r.hold(fmt.Sprintf("k%03d", i)))
	}
	r.covered()
	if _, err := r.cli.Delete(r.ctx, r.prefix+"k", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		etcdtest.Within(t, h.gone, 5*time.Second, "a held key's end")
	}
	r.s.mu.Lock()
	n := len(r.s.idle)
	r.s.mu.Unlock()
	if n > maxLinger {
		t.Fatalf("%d idle watches, want at most %d", n, maxLinger)
	}
	// The ended ones deliver nothing more: a key put and deleted again is
	// heard only by a kept watch, the sentinel's deletion after it.
	var notKept []string
	r.s.mu.Lock()
	for i := range hs {
		if k := fmt.Sprintf("k%03d", i); r.s.idle[r.prefix+k] == nil {
			notKept = append(notKept, k)
		}
	}
	r.s.mu.Unlock()
	if len(notKept) == 0 {
		t.Fatal("every watch kept")
	}
	r.put(notKept[0])
	r.del(notKept[0])
	r.del("sentinel")
	r.delivered("sentinel", 1)
	if n := r.deliveredOf(notKept[0]); n != 1 {
		t.Fatalf("%s's deletions delivered %d times, want 1 (its watch ended with the first)", notKept[0], n)
	}
}
