// Package watch is the one deletion watch per session and namespace that
// tells every hold of its key's deletion, in the step that receives it.
package watch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// linger is how long an idle watch of a session that holds again and again
// stays open.
const linger = 15 * time.Second

// New returns the watcher of the namespace prefix.
func New[H comparable](c *Config[H], prefix string) *Watcher[H] {
	return &Watcher[H]{c: c, prefix: prefix, keys: make(map[string]H), expected: make(map[string]int64)}
}

// Config is what the watches of one session share; H is its hold type.
type Config[H comparable] struct {
	Client *clientv3.Client
	// Ctx ends every watch (the session's Close); Go runs a goroutine the
	// session waits for, false once it is closing.
	Ctx context.Context
	Go  func(fn func()) bool
	// Key, Rev (CreateRevision) and At (the revision the acquisition
	// confirmed the key at) read a hold; Gone tells it its key is gone.
	Key     func(H) string
	Rev, At func(H) int64
	Gone    func(H)
	// StreamEnded, BeforeReread, Deleted, Established and Followed are
	// test hooks, read when called.
	StreamEnded  func()
	BeforeReread func()
	Deleted      func(key string)
	Established  func()
	Followed     func(ok bool)
}

// Watcher tells the holds of one session under one namespace when their
// keys are deleted: one watch for every key held. A key is registered after
// its acquisition confirmed it at revision At; a deletion after that must
// reach the hold whatever the stream was doing, so a key the stream may not
// cover (stream started or re-read after At, key not expected) is read once.
type Watcher[H comparable] struct {
	c      *Config[H]
	prefix string
	cancel context.CancelFunc

	mu       sync.Mutex
	keys     map[string]H
	expected map[string]int64 // keys being acquired: a deletion seen is kept
	from     int64            // first revision the current stream delivers
	linger   *time.Timer      // stops an idle watch later
	uses     int

	// What Follow needs: whether the stream is established, the deletions
	// it delivered lately (every one at or after recentFrom is there), and
	// who follows which key.
	gen        int        // the current loop's: a stopped loop's late news is ignored
	live       bool       // the current loop's stream delivers: false once stopped
	recent     []deletion // a ring of the last maxRecent
	next       int        // where the next deletion goes in recent
	recentFrom int64
	followers  map[string][]*follower
}

type deletion struct {
	key      string
	at       int64
	released bool
}

type follower struct {
	keys []string
	read int64
	f    func(key string, at int64, released bool)
}

// maxRecent bounds the deletions kept for a Follow that comes after them.
const maxRecent = 64

// Expect marks key as being acquired, before the confirming read.
func (w *Watcher[H]) Expect(key string) {
	w.mu.Lock()
	if w.cancel != nil {
		w.expected[key] = 0
	}
	w.mu.Unlock()
}

func (w *Watcher[H]) Unexpect(key string) {
	w.mu.Lock()
	delete(w.expected, key)
	w.settle()
	w.mu.Unlock()
}

// Register ends h (once) when its key, created at h.rev and confirmed at
// h.at, is deleted.
func (w *Watcher[H]) Register(h H) {
	c := w.c
	key, rev, at := c.Key(h), c.Rev(h), c.At(h)
	w.mu.Lock()
	deletedAt, wasExpected := w.expected[key]
	delete(w.expected, key)
	w.keys[key] = h
	w.uses++
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	check := false
	switch {
	case w.cancel == nil:
		w.start(at + 1)
	case deletedAt > rev:
		delete(w.keys, key)
		w.mu.Unlock()
		c.Gone(h)
		return
	case !wasExpected || w.from > at+1:
		check = true
	}
	w.mu.Unlock()
	if check {
		w.checkOnce(h)
	}
}

// Follow calls f, serially and with the watcher's lock held (so f must
// only note and signal), for each deletion of one of keys at a revision
// after read, whether delivered already or later, with whether its
// revision looks like a holder's own release (marks: it deleted that key
// and one of the namespace's release marks, nothing else), and f("", 0,
// false) once if the stream breaks. It returns false, calling nothing,
// when the stream runs not or may have missed such a deletion: the caller
// watches itself. A waiter whose session holds already so shares its
// stream.
func (w *Watcher[H]) Follow(keys []string, read int64, f func(key string, at int64, released bool)) (stop func(), ok bool) {
	stop, ok = w.follow(keys, read, f)
	if w.c.Followed != nil {
		w.c.Followed(ok)
	}
	return stop, ok
}

func (w *Watcher[H]) follow(keys []string, read int64, f func(key string, at int64, released bool)) (stop func(), ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.live || read+1 < w.recentFrom {
		return nil, false
	}
	fl := &follower{keys: keys, read: read, f: f}
	for i := range w.recent { // oldest first: the ring's next slot is its oldest
		if d := w.recent[(w.next+i)%len(w.recent)]; d.at > read && slices.Contains(keys, d.key) {
			f(d.key, d.at, d.released)
		}
	}
	if w.followers == nil {
		w.followers = make(map[string][]*follower)
	}
	for _, k := range keys {
		w.followers[k] = append(w.followers[k], fl)
	}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, k := range fl.keys {
			if l := slices.DeleteFunc(w.followers[k], func(o *follower) bool { return o == fl }); len(l) > 0 {
				w.followers[k] = l
			} else {
				delete(w.followers, k)
			}
		}
		w.settle()
	}, true
}

// established marks loop gen's stream live from revision first on.
func (w *Watcher[H]) established(gen int, first int64) {
	w.mu.Lock()
	live := gen == w.gen
	if live {
		w.live, w.recent, w.next, w.recentFrom = true, w.recent[:0], 0, first
	}
	w.mu.Unlock()
	if live {
		call(w.c.Established)
	}
}

// broken tells every follower that loop gen's stream ended.
func (w *Watcher[H]) broken(gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return // stopped while idle, so never followed since: the followers are the next loop's
	}
	w.live = false
	seen := map[*follower]bool{}
	for _, l := range w.followers {
		for _, fl := range l {
			if !seen[fl] {
				seen[fl] = true
				fl.f("", 0, false)
			}
		}
	}
	clear(w.followers)
}

// Unregister stops the news of h's key; the watch lingers a TTL after the
// last key when the session holds again and again, and stops at once after
// a single hold so that drained waiters stop receiving the namespace.
func (w *Watcher[H]) Unregister(h H) {
	key := w.c.Key(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[key] == h {
		delete(w.keys, key)
	}
	w.settle()
}

// settle stops an idle watch, at once or after linger; w.mu is held.
func (w *Watcher[H]) settle() {
	switch {
	case !w.idle() || w.cancel == nil || w.linger != nil:
	case w.uses < 2:
		w.stop()
	default:
		w.linger = time.AfterFunc(linger, func() { w.stopIfIdle() })
	}
}

func (w *Watcher[H]) StopLinger() {
	w.mu.Lock()
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	w.mu.Unlock()
}

// stopIfIdle ends the watch when no key is held or expected.
func (w *Watcher[H]) stopIfIdle() bool {
	w.StopLinger()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.idle() || w.cancel == nil {
		return false
	}
	w.stop()
	return true
}

// stop ends the current loop, idle; w.mu is held. Its stream is down from
// here on, before the loop sees it end: a follower that came meanwhile
// would be told neither of the deletions after the stream stopped nor, once
// a new hold starts the next loop, of its end. So nobody follows it, and
// what it still delivers is ignored.
func (w *Watcher[H]) stop() {
	w.cancel()
	w.cancel = nil
	w.live = false
	w.gen++
}

// idle: nothing held, being acquired or followed; w.mu is held.
func (w *Watcher[H]) idle() bool {
	return len(w.keys) == 0 && len(w.expected) == 0 && len(w.followers) == 0
}

// start runs the watch loop from revision from; w.mu is held.
func (w *Watcher[H]) start(from int64) {
	ctx, cancel := context.WithCancel(w.c.Ctx)
	w.gen++
	gen := w.gen
	w.live = false
	if w.c.Go(func() { w.loop(ctx, gen, from) }) {
		w.cancel, w.from = cancel, from
	} else {
		cancel()
	}
}

// loop watches from the current revision, which etcd serves at once (a past
// one waits up to 100 ms in its unsynced set), reading once to cover any
// gap since from; after a broken stream it reads what is held and resumes.
func (w *Watcher[H]) loop(ctx context.Context, gen int, from int64) {
	failed := false // the last re-read failed: stop first if idle
	_ = retry.Loop(ctx, rereadPause, rereadPause, func(ctx context.Context) (bool, error) {
		if failed && w.stopIfIdle() {
			return true, nil
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		// Deletions only: with puts every session watching a namespace
		// would receive every acquisition in it (issue 34: 20 sessions, 20
		// events per lock taken). A release deletes a mark in its revision.
		for wr := range w.c.Client.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created {
				if wr.Header.Revision >= from {
					if _, ok := w.reread(ctx, gen); !ok {
						break
					}
				}
				w.established(gen, wr.Header.Revision+1) // etcd delivers every event after it
			}
			marked := marks(wr.Events)
			for _, ev := range wr.Events {
				if k := string(ev.Kv.Key); ev.Type == mvccpb.DELETE && !keys.IsReleased(k) {
					w.deleted(gen, k, ev.Kv.ModRevision, slices.Contains(marked, ev.Kv.ModRevision))
				}
			}
		}
		cancel()
		call(w.c.StreamEnded)
		w.broken(gen)
		if ctx.Err() != nil || w.stopIfIdle() {
			return true, nil
		}
		call(w.c.BeforeReread)
		rev, ok := w.reread(ctx, gen)
		if failed = !ok; failed {
			return false, errReread
		}
		from = rev + 1
		return false, nil
	}, nil)
}

// marks returns the revisions among evs that are a holder's release: one
// release mark and one other key deleted, nothing else but the records
// that go with that key (keys.IsRecord; one response holds
// whole revisions, in the order of their ops). A range delete that spans a
// mark, a revoke of a lease a mark was put on, a hand-over that skips
// candidates, or a waiter's own key going with the key ahead are not:
// their followers read before they hold.
func marks(evs []*clientv3.Event) []int64 {
	var revs []int64
	for i := 0; i < len(evs); {
		rev, mark, other := evs[i].Kv.ModRevision, 0, 0
		for ; i < len(evs) && evs[i].Kv.ModRevision == rev; i++ {
			switch {
			case evs[i].Type != mvccpb.DELETE:
			case keys.IsReleased(string(evs[i].Kv.Key)):
				mark++
			case keys.IsRecord(string(evs[i].Kv.Key)): // gone with its holder's key
			default:
				other++
			}
		}
		if planted.On("f") && other > 0 {
			mark, other = 1, 1
		}
		if mark == 1 && other == 1 {
			revs = append(revs, rev)
		}
	}
	return revs
}

// rereadPause spaces the re-reads of a namespace while they fail.
const rereadPause = 100 * time.Millisecond

var errReread = errors.New("namespace re-read failed")

// deleted ends the hold of key in this goroutine, if the key was created
// before the deletion, and tells its followers; loop gen delivered it.
func (w *Watcher[H]) deleted(gen int, key string, at int64, released bool) {
	w.mu.Lock()
	if gen != w.gen { // a stopped loop's: out of order with the next one's
		w.mu.Unlock()
		return
	}
	if _, ok := w.expected[key]; ok {
		w.expected[key] = at
	}
	h, ok := w.keys[key]
	ok = ok && at > w.c.Rev(h) // an older deletion is of an earlier holder of this key
	if ok {
		delete(w.keys, key)
	}
	if len(w.recent) < maxRecent {
		w.recent = append(w.recent, deletion{key, at, released})
	} else {
		w.recentFrom = w.recent[w.next].at + 1
		w.recent[w.next] = deletion{key, at, released}
		w.next = (w.next + 1) % maxRecent
	}
	for _, fl := range w.followers[key] {
		if planted.On("l") && released {
			continue
		}
		if at > fl.read {
			fl.f(key, at, released)
		}
	}
	w.mu.Unlock()
	if ok {
		w.c.Gone(h)
	}
	if w.c.Deleted != nil {
		w.c.Deleted(key)
	}
}

// reread reads the namespace's keys and ends the holds registered before
// the read whose keys are gone (for loop gen, if still current); it
// returns the revision read at.
func (w *Watcher[H]) reread(ctx context.Context, gen int) (int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := w.c.Client.Get(rctx, w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return 0, false
	}
	rev := resp.Header.Revision
	present := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv.CreateRevision
	}
	var gone []H
	w.mu.Lock()
	if gen != w.gen {
		w.mu.Unlock()
		return rev, true
	}
	for k, h := range w.keys {
		if w.c.At(h) < rev && present[k] != w.c.Rev(h) {
			delete(w.keys, k)
			gone = append(gone, h)
		}
	}
	clear(w.expected) // their registration reads them
	w.from = rev + 1
	w.mu.Unlock()
	for _, h := range gone {
		w.c.Gone(h)
	}
	return rev, true
}

// checkOnce reads h's key (a few attempts) and ends h if it is gone.
func (w *Watcher[H]) checkOnce(h H) {
	key := w.c.Key(h)
	for range 3 {
		ctx, cancel := context.WithTimeout(w.c.Ctx, 2*time.Second)
		resp, err := w.c.Client.Get(ctx, key, clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == w.c.Rev(h) {
			return
		}
		w.mu.Lock()
		mine := w.keys[key] == h
		if mine {
			delete(w.keys, key)
		}
		w.mu.Unlock()
		if mine {
			w.c.Gone(h)
		}
		return
	}
}

func call(f func()) {
	if f != nil {
		f()
	}
}
