package watch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
)

// hold is a test's hold: a key put at rev.
type hold struct {
	key      string
	rev      int64
	id       int64
	gone     chan struct{}
	goneOnce sync.Once
}

// rig is a Stream on a real member with hooks the test sets before use.
type rig struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	prefix string
	s      *Stream[*hold]
	cancel context.CancelFunc // the session's Close

	mu          sync.Mutex
	streamEnded func()
	reread      func()
	deleted     []string
	established chan struct{}
}

// newRig's stream uses watchCli, if given, else the client that writes.
func newRig(t *testing.T, watchCli ...*clientv3.Client) *rig {
	t.Helper()
	r := &rig{t: t, ctx: etcdtest.Context(t, 30*time.Second), cli: srv.Client(t),
		prefix: fmt.Sprintf("/watch-test/%s-%d/", t.Name(), time.Now().UnixNano()), established: make(chan struct{}, 16)}
	wcli := r.cli
	if len(watchCli) > 0 {
		wcli = watchCli[0]
	}
	sctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var closing sync.Mutex
	r.s = New(&Config[*hold]{
		Client: wcli, Ctx: sctx,
		Go: func(fn func()) bool {
			closing.Lock()
			defer closing.Unlock()
			if sctx.Err() != nil {
				return false
			}
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
			return true
		},
		Key: func(h *hold) string { return h.key }, Rev: func(h *hold) int64 { return h.rev },
		Gone: func(h *hold) { h.goneOnce.Do(func() { close(h.gone) }) },
		Hooks: &Hooks{
			StreamEnded: func() {
				r.mu.Lock()
				f := r.streamEnded
				r.mu.Unlock()
				call(f)
			},
			BeforeGapRead: func() {
				r.mu.Lock()
				f := r.reread
				r.mu.Unlock()
				call(f)
			},
			Deleted: func(key string) {
				r.mu.Lock()
				r.deleted = append(r.deleted, key)
				r.mu.Unlock()
			},
			Established: func() {
				select {
				case r.established <- struct{}{}:
				default:
				}
			},
		},
	})
	return r
}

// put writes key under the prefix and returns its revision.
func (r *rig) put(key string) int64 {
	r.t.Helper()
	resp, err := r.cli.Put(r.ctx, r.prefix+key, "")
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Header.Revision
}

func (r *rig) del(key string) int64 {
	r.t.Helper()
	resp, err := r.cli.Delete(r.ctx, r.prefix+key)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Header.Revision
}

// hold puts key, watched from before, and registers it as held.
func (r *rig) hold(key string) *hold {
	r.t.Helper()
	id := r.s.Expect(r.prefix + key)
	rev := r.put(key)
	h := &hold{key: r.prefix + key, rev: rev, id: id, gone: make(chan struct{})}
	r.s.Register(h, id, rev)
	return h
}

func (r *rig) live() {
	r.t.Helper()
	select {
	case <-r.established:
	case <-time.After(5 * time.Second):
		r.t.Fatal("the stream was never established")
	}
}

// holdStreamEnd holds the next loop whose stream ends in its StreamEnded
// hook: ended closes then; release lets it go on (also on cleanup).
func (r *rig) holdStreamEnd() (ended <-chan struct{}, release func()) {
	e, rel := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	release = func() { released.Do(func() { close(rel) }) }
	r.t.Cleanup(release)
	r.mu.Lock()
	r.streamEnded = func() { once.Do(func() { close(e); <-rel }) }
	r.mu.Unlock()
	return e, release
}

// follower records what Follow tells about its keys.
type follower struct {
	mu      sync.Mutex
	notes   []Note
	changed chan struct{}
	stop    func()
}

func (r *rig) follow(keys ...string) *follower {
	fl := &follower{changed: make(chan struct{}, 1)}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = r.prefix + k
	}
	fl.stop = r.s.Follow(0, full, func(n Note) {
		fl.mu.Lock()
		fl.notes = append(fl.notes, n)
		fl.mu.Unlock()
		select {
		case fl.changed <- struct{}{}:
		default:
		}
	})
	r.t.Cleanup(fl.stop)
	return fl
}

// await waits until the follower was told kind, and returns that note.
func (fl *follower) await(t *testing.T, kind Kind, what string) Note {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		fl.mu.Lock()
		for _, n := range fl.notes {
			if n.Kind == kind {
				fl.mu.Unlock()
				return n
			}
		}
		fl.mu.Unlock()
		select {
		case <-fl.changed:
		case <-deadline:
			t.Fatalf("the follower was never told %s", what)
		}
	}
}

// A hold's watch is of its own key: the deletion of another key of the
// namespace is not delivered to the session at all (the namespace watch
// this replaced delivered every deletion of the namespace to every session
// holding there), and its own key's deletion ends it.
func TestAHoldIsToldOfItsOwnKeyOnly(t *testing.T) {
	r := newRig(t)
	h := r.hold("a")
	r.live()
	r.covered() // else a's gap read may find it gone, before its watch tells
	r.put("other")
	r.del("other")
	at := r.del("a")
	etcdtest.Within(t, h.gone, 5*time.Second, "the held key's deletion")
	r.delivered("a", 1) // its hook runs after Gone; another key's deletion, earlier, would be before it
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.deleted) != 1 || r.deleted[0] != r.prefix+"a" {
		t.Fatalf("the stream delivered the deletions of %q (a deleted at %d), want the held key's alone", r.deleted, at)
	}
}

// A hold whose watch began after its key went (deleted after the
// revision that confirmed it: the stream was not up, or broke, before) is
// told, by a read of its key; one whose watch began before its key is told
// by the watch.
func TestAHoldWhoseKeyWentBeforeItsWatchBeganIsTold(t *testing.T) {
	r := newRig(t)
	rev := r.put("a")
	r.del("a")
	h := &hold{key: r.prefix + "a", rev: rev, gone: make(chan struct{})}
	h.id = r.s.Expect(h.key)
	r.covered()
	r.s.Register(h, h.id, rev)
	etcdtest.Within(t, h.gone, 5*time.Second, "a deletion before its watch began")

	h2 := r.hold("b")
	r.covered()
	r.del("b")
	etcdtest.Within(t, h2.gone, 5*time.Second, "a deletion after its watch began")
}

// The watch of a released key serves its next hold, and a deletion of the
// next incarnation it delivered while no hold had it (between that hold's
// confirming read and its registration) ends the hold at once; the
// release's own deletion does not.
func TestAReleasedKeysWatchServesItsNextHold(t *testing.T) {
	r := newRig(t)
	h0 := r.hold("a")
	r.covered()
	r.s.Unregister(h0, h0.id) // released once: its watch ends, and the key is noted
	r.s.mu.Lock()
	kept := len(r.s.idle)
	r.s.mu.Unlock()
	if kept != 0 {
		t.Fatalf("a key released once kept %d idle watches, want none (its release would cost an event)", kept)
	}
	r.del("a")
	h1 := r.hold("a")
	r.covered()
	r.s.Unregister(h1, h1.id) // released again: kept
	r.del("a")                // the release
	h2 := r.hold("a")
	r.covered()
	if h2.id != h1.id {
		t.Fatalf("the next hold of the key got watch %d, want the released hold's %d", h2.id, h1.id)
	}
	r.delivered("a", 1) // Gone, had it been called, was called first (the first release went unwatched)
	select {
	case <-h2.gone:
		t.Fatal("the previous incarnation's deletion ended the next hold")
	default:
	}
	r.s.Unregister(h2, h2.id)

	id := r.s.Expect(r.prefix + "a")
	rev := r.put("a") // an incarnation deleted before its hold registers
	r.del("a")
	r.delivered("a", 2)
	h3 := &hold{key: r.prefix + "a", rev: rev, id: id, gone: make(chan struct{})}
	r.s.Register(h3, id, rev)
	if h3.id != h1.id {
		t.Fatalf("the third hold of the key got watch %d, want %d", h3.id, h1.id)
	}
	etcdtest.Within(t, h3.gone, time.Second, "a deletion the idle watch delivered before the registration")
}

// covered waits until every watch of a hold or of a key being acquired
// is known to tell every deletion after its start or confirming revision.
func (r *rig) covered() {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.s.mu.Lock()
		n := len(r.s.pending) + len(r.s.unsent)
		for _, e := range r.s.keys {
			if e.created == 0 {
				n++
			}
		}
		r.s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d holds' watches are still not known to cover their keys", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// delivered waits until the stream delivered n deletions of key.
func (r *rig) delivered(key string, n int) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := 0
		for _, k := range r.deleted {
			if k == r.prefix+key {
				got++
			}
		}
		r.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the stream delivered %d deletions of %s, want %d", got, key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A follower is told when each watch runs, then of its key's deletion.
func TestAFollowerIsToldWhenItsWatchRunsAndOfTheDeletion(t *testing.T) {
	r := newRig(t)
	r.put("a")
	fl := r.follow("a")
	c := fl.await(t, Created, "that its watch runs")
	at := r.del("a")
	d := fl.await(t, Deleted, "of the deletion")
	if d.Rev != at || c.Rev >= at {
		t.Fatalf("told %+v then %+v, want a watch begun before %d and the deletion at it", c, d, at)
	}
}

// A follower of a stream stopped while idle (its last watch gone) is
// told: a Follow that comes before the stopped loop saw its end starts the
// next loop, whose news it gets; the stopped loop's is ignored. Forced:
// the stopped loop is held in its StreamEnded hook meanwhile.
func TestAFollowerOfAStoppedStreamIsTold(t *testing.T) {
	r := newRig(t)
	r.put("x")
	first := r.follow("x")
	first.await(t, Created, "that its watch runs")
	ended, release := r.holdStreamEnd()
	first.stop() // nothing left: the stream stops
	etcdtest.Within(t, ended, 5*time.Second, "the stopped stream's end")
	r.put("y")
	fl := r.follow("y")
	fl.await(t, Created, "that its watch runs, while the stopped loop has not ended")
	r.del("y")
	release()
	fl.await(t, Deleted, "of the deletion")
}

// A stream that breaks (here: compacted past where it would resume, after
// its connection dropped) tells every follower, and reads its holds again:
// a hold whose key went while no stream ran is told, one whose key stayed
// is watched on from the read. Forced: the connection is held while the
// keys go and the history is compacted.
func TestABrokenStreamTellsItsFollowersAndReadsItsHoldsAgain(t *testing.T) {
	cli, p := srv.Proxied(t)
	r := newRig(t, cli)
	gone, kept := r.hold("gone"), r.hold("kept")
	r.put("waited")
	fl := r.follow("waited")
	fl.await(t, Created, "that its watch runs")
	reread := make(chan struct{})
	var once sync.Once
	r.mu.Lock()
	r.reread = func() { once.Do(func() { close(reread) }) }
	r.mu.Unlock()
	p.Blackhole()
	r.del("waited")
	rev := r.del("gone")
	if _, err := r.cli.Compact(r.ctx, rev); err != nil {
		t.Fatal(err)
	}
	p.DropConnections()
	p.Restore()
	fl.await(t, Ended, "that the stream broke")
	etcdtest.Within(t, reread, 10*time.Second, "the re-read after the break")
	etcdtest.Within(t, gone.gone, 10*time.Second, "the deletion while no stream ran")
	r.del("kept")
	etcdtest.Within(t, kept.gone, 10*time.Second, "a deletion after the re-read")
}

// Close ends the stream: a follower is told.
func TestCloseTellsTheFollowers(t *testing.T) {
	r := newRig(t)
	r.hold("a")
	r.put("waited")
	fl := r.follow("waited")
	fl.await(t, Created, "that its watch runs")
	r.cancel()
	fl.await(t, Ended, "that the session closed")
}

// Reset ends the stream and every watch on it at once (the end of a
// lease: its holds' watches go without a cancel each): a waiter is told,
// and a hold still registered is watched anew, its key read once.
func TestResetEndsTheStreamAndWatchesWhatIsLeftAnew(t *testing.T) {
	r := newRig(t)
	kept := r.hold("kept")
	r.put("waited")
	fl := r.follow("waited")
	fl.await(t, Created, "that its watch runs")
	r.covered()
	r.s.Reset()
	fl.await(t, Ended, "that the stream ended")
	r.covered() // watched anew on the next stream
	r.del("kept")
	etcdtest.Within(t, kept.gone, 5*time.Second, "a deletion after the reset")
}
