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
	rev, at  int64
	gone     chan struct{}
	goneOnce sync.Once
}

// rig is a Watcher on a real member with hooks the test sets before use.
type rig struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	prefix string
	w      *Watcher[*hold]
	cancel context.CancelFunc // the session's Close

	mu          sync.Mutex
	streamEnded func()
	deletedHook func(key string)
	reread      func()
	established chan struct{}
}

// newRig's watcher uses watchCli, if given, else the client that writes.
func newRig(t *testing.T, name string, watchCli ...*clientv3.Client) *rig {
	t.Helper()
	r := &rig{t: t, ctx: etcdtest.Context(t, 30*time.Second), cli: srv.Client(t),
		prefix: "/watch-test/" + name + "/", established: make(chan struct{}, 16)}
	wcli := r.cli
	if len(watchCli) > 0 {
		wcli = watchCli[0]
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	cfg := &Config[*hold]{
		Client: wcli, Ctx: wctx,
		Go: func(fn func()) bool {
			if wctx.Err() != nil {
				return false // closing
			}
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
			return true
		},
		Key: func(h *hold) string { return h.key }, Rev: func(h *hold) int64 { return h.rev }, At: func(h *hold) int64 { return h.at },
		Gone: func(h *hold) { h.goneOnce.Do(func() { close(h.gone) }) },
		StreamEnded: func() {
			r.mu.Lock()
			f := r.streamEnded
			r.mu.Unlock()
			call(f)
		},
		BeforeReread: func() {
			r.mu.Lock()
			f := r.reread
			r.mu.Unlock()
			call(f)
		},
		Deleted: func(key string) {
			r.mu.Lock()
			f := r.deletedHook
			r.mu.Unlock()
			if f != nil {
				f(key)
			}
		},
		Established: func() {
			select {
			case r.established <- struct{}{}:
			default:
			}
		},
	}
	r.w = New(cfg, r.prefix)
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

// hold puts key and registers it as held.
func (r *rig) hold(key string) *hold {
	r.t.Helper()
	rev := r.put(key)
	h := &hold{key: r.prefix + key, rev: rev, at: rev, gone: make(chan struct{})}
	r.w.Register(h)
	return h
}

func (r *rig) del(key string) int64 {
	r.t.Helper()
	resp, err := r.cli.Delete(r.ctx, r.prefix+key)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Header.Revision
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

// following follows key from read; told closes when the follower hears of
// the key's deletion or of the stream's end. ok is Follow's answer.
func (r *rig) following(key string, read int64) (told <-chan struct{}, ok bool) {
	ch := make(chan struct{})
	var once sync.Once
	stop, ok := r.w.Follow([]string{r.prefix + key}, read, func(string, int64, bool) { once.Do(func() { close(ch) }) })
	if ok {
		r.t.Cleanup(stop)
	}
	return ch, ok
}

// followLive puts key and follows it from there on a live stream.
func (r *rig) followLive(key string) (read int64, told <-chan struct{}) {
	r.t.Helper()
	read = r.put(key)
	told, ok := r.following(key, read)
	if !ok {
		r.t.Fatal("Follow refused a live stream")
	}
	return read, told
}

// heard fails unless a follower that Follow took hears within d.
func heard(t *testing.T, told <-chan struct{}, ok bool, what string) {
	t.Helper()
	if !ok {
		return // refused: the waiter watches on its own
	}
	select {
	case <-told:
	case <-time.After(5 * time.Second):
		t.Fatalf("a follower taken %s never heard of the deletion nor of the stream's end", what)
	}
}

// Every way a watch stops while idle: a follower that comes before the
// stopped loop saw its stream end must be refused (it watches on its own)
// or be told; a new hold starting the next loop meanwhile used to leave it
// on a stream that no longer ran, told of nothing. Forced: the stopped loop
// is held in its StreamEnded hook while the follower follows, the key it
// waits for goes, and the next loop starts.
func TestAFollowerOfAStoppedWatchIsRefusedOrTold(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(r *rig) // from one established stream with nothing held to a stopped one
	}{
		{"a single hold's release", func(r *rig) {
			h := r.hold("a")
			r.live()
			r.w.Unregister(h)
		}},
		{"an acquisition given up", func(r *rig) {
			h := r.hold("a")
			r.live()
			r.w.Expect(r.prefix + "b")
			r.w.Unregister(h)
			r.w.Unexpect(r.prefix + "b")
		}},
		{"the last follower's leave", func(r *rig) {
			h := r.hold("a")
			r.live()
			stop, ok := r.w.Follow([]string{r.prefix + "a"}, h.at, func(string, int64, bool) {})
			if !ok {
				r.t.Fatal("Follow refused a live stream")
			}
			r.w.Unregister(h)
			stop()
		}},
		{"the linger's end", func(r *rig) {
			a, b := r.hold("a"), r.hold("b")
			r.live()
			r.w.Unregister(a)
			r.w.Unregister(b) // held twice: the watch lingers
			// What the linger's timer does:
			if !r.w.stopIfIdle() {
				r.t.Fatal("the idle watch did not stop")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, fmt.Sprintf("stopped-%d", time.Now().UnixNano()))
			ended, release := r.holdStreamEnd()
			tc.stop(r)
			etcdtest.Within(t, ended, 5*time.Second, "the stopped stream's end")
			read := r.put("waited") // after the stream's first revision: Follow may take it
			told, ok := r.following("waited", read)
			r.del("waited") // no stream runs
			r.hold("next")  // the next loop starts
			r.live()
			release()
			heard(t, told, ok, "while the watch stopped")
		})
	}
}

// A stopped loop may still be handing out the deletions of a response it
// received: those must not reach the next loop's kept deletions, older
// than its stream's first revision, where they made a Follow from before
// that revision look covered once the ring wrapped (the kept range is taken
// from the oldest entry). Forced: the loop is held in the Deleted hook of
// the first of two deletions in one revision while its hold's release stops
// it, a key goes while no stream runs, and the next loop is up.
func TestAStoppedLoopsLateDeletionsAreIgnored(t *testing.T) {
	r := newRig(t, fmt.Sprintf("late-%d", time.Now().UnixNano()))
	h := r.hold("a")
	r.live()
	r.put("b")
	r.put("missed")
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(paused) }); close(resume) })
	deleted := make(chan string, 2*maxRecent)
	r.mu.Lock()
	r.deletedHook = func(key string) {
		if key == r.prefix+"a" {
			once.Do(func() { close(paused); <-resume })
			return
		}
		deleted <- key
	}
	r.mu.Unlock()
	ended := make(chan struct{})
	var endOnce sync.Once
	r.mu.Lock()
	r.streamEnded = func() { endOnce.Do(func() { close(ended) }) }
	r.mu.Unlock()

	resp, err := r.cli.Txn(r.ctx).Then(clientv3.OpDelete(r.prefix+"a"), clientv3.OpDelete(r.prefix+"b")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	read := resp.Header.Revision
	etcdtest.Within(t, paused, 5*time.Second, "the deletion of a")
	r.w.Unregister(h) // its only hold: the watch stops
	r.del("missed")   // no stream runs
	r.hold("next")
	r.live()
	resume <- struct{}{}
	etcdtest.Within(t, ended, 5*time.Second, "the stopped loop's end")
	for i := range maxRecent { // the next stream's deletions wrap the ring
		k := fmt.Sprintf("noise-%03d", i)
		r.put(k)
		r.del(k)
		select {
		case got := <-deleted:
			for got != r.prefix+k {
				got = <-deleted
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the next stream never delivered the deletion of %s", k)
		}
	}
	told, ok := r.following("missed", read)
	heard(t, told, ok, "from before the next stream's first revision")
}

// A stream that breaks (here: compacted past the revision it resumes from,
// after its connection dropped) tells every follower it had, and refuses a
// follower until the next stream is up: a deletion while no stream ran
// reaches neither otherwise. Forced: the connection is held while the key
// goes and the history is compacted, and a second follower comes in the
// re-read's hook.
func TestABrokenStreamTellsItsFollowersAndRefusesNewOnes(t *testing.T) {
	cli, p := srv.Proxied(t)
	r := newRig(t, fmt.Sprintf("broken-%d", time.Now().UnixNano()), cli)
	r.hold("a")
	r.live()
	read, told := r.followLive("waited")
	var late <-chan struct{}
	lateOK, rereading := false, make(chan struct{})
	var once sync.Once
	r.mu.Lock()
	r.reread = func() {
		once.Do(func() {
			late, lateOK = r.following("waited", read)
			close(rereading)
		})
	}
	r.mu.Unlock()
	p.Blackhole()
	rev := r.del("waited")
	if _, err := r.cli.Compact(r.ctx, rev); err != nil {
		t.Fatal(err)
	}
	p.DropConnections()
	p.Restore()
	heard(t, told, true, "before the stream broke")
	etcdtest.Within(t, rereading, 10*time.Second, "the re-read after the break")
	heard(t, late, lateOK, "while the stream was down")
}

// Close ends the stream: a follower is told, also when a hold registers
// while the ended loop has not yet seen its end (it starts no loop).
func TestCloseTellsTheFollowers(t *testing.T) {
	r := newRig(t, fmt.Sprintf("close-%d", time.Now().UnixNano()))
	r.hold("a")
	r.live()
	_, told := r.followLive("waited")
	ended, release := r.holdStreamEnd()
	r.cancel()
	etcdtest.Within(t, ended, 5*time.Second, "the stream's end on Close")
	r.hold("late")
	release()
	heard(t, told, true, "before Close")
}
