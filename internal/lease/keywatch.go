package lease

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyWatcher tells the holders of keys on one session, under one
// namespace, when their keys are deleted. One watch on the namespace serves
// every key the session holds there, so holding 10,000 locks costs one
// watch, not 10,000 (each would cost two goroutines and a few KiB).
type keyWatcher struct {
	s      *Session
	prefix string
	cancel context.CancelFunc

	mu sync.Mutex
	// keys maps a held key to its CreateRevision and callback.
	keys map[string]*watchedKey
	// from is the revision the current watch stream delivers events from;
	// a key acquired at an older revision is read once to cover the gap.
	from int64
	// linger stops an idle watch later.
	linger *time.Timer
	// uses counts the keys ever watched: a session that holds again is
	// worth a lingering watch.
	uses int
}

type watchedKey struct {
	rev  int64
	gone func()
}

// WatchDeletion calls gone, once and in its own goroutine, when key (with
// CreateRevision rev, known to exist at revision at) is deleted or
// replaced. stop ends the watch for the key; gone may still run once if it
// had already begun.
func (s *Session) WatchDeletion(key string, rev, at int64, gone func()) (stop func()) {
	prefix := namespaceOf(key)
	s.mu.Lock()
	if s.watchers == nil {
		s.watchers = make(map[string]*keyWatcher)
	}
	w, ok := s.watchers[prefix]
	if !ok {
		w = &keyWatcher{s: s, prefix: prefix, keys: make(map[string]*watchedKey)}
		s.watchers[prefix] = w
	}
	s.mu.Unlock()

	entry := &watchedKey{rev: rev, gone: gone}
	w.mu.Lock()
	w.keys[key] = entry
	w.uses++
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	starting := w.cancel == nil
	if starting {
		w.start(at + 1)
	}
	gap := !starting && at+1 < w.from
	w.mu.Unlock()
	if gap {
		w.check(map[string]*watchedKey{key: entry})
	}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.keys[key] == entry {
			delete(w.keys, key)
		}
		// Keep the watch a while after the last key goes: a lock taken and
		// released in a loop would otherwise create and cancel a watch every
		// time. An idle session gives it up, so that sessions which held
		// once do not all keep receiving the namespace's deletions.
		switch {
		case len(w.keys) > 0 || w.cancel == nil || w.linger != nil:
		case w.uses < 2:
			// Held once so far (a waiter's turn): no reason to expect more,
			// and many such sessions lingering would each receive every
			// deletion of the namespace.
			w.cancel()
			w.cancel = nil
		default:
			w.linger = time.AfterFunc(w.s.ttl, w.stopIfIdle)
		}
	}
}

// stopIfIdle ends the watch if no key was registered since it was armed.
func (w *keyWatcher) stopIfIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.linger = nil
	if len(w.keys) == 0 && w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

// namespaceOf is "/<ns>/v1/" for a key "/<ns>/v1/...".
func namespaceOf(key string) string {
	parts := strings.SplitN(key, "/", 4)
	if len(parts) < 4 {
		return key
	}
	return "/" + parts[1] + "/" + parts[2] + "/"
}

// start runs the watch loop; w.mu is held.
func (w *keyWatcher) start(from int64) {
	ctx, cancel := context.WithCancel(w.s.ctx)
	w.cancel, w.from = cancel, from
	w.s.wg.Add(1)
	go func() {
		defer w.s.wg.Done()
		w.loop(ctx, from)
	}()
}

func (w *keyWatcher) loop(ctx context.Context, from int64) {
	cli := w.s.cli
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(from)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					w.deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
				}
				from = ev.Kv.ModRevision + 1
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		// The stream broke (compaction, no leader, connection lost): read
		// what is held, then watch again from there.
		w.mu.Lock()
		held := make(map[string]*watchedKey, len(w.keys))
		for k, e := range w.keys {
			held[k] = e
		}
		w.mu.Unlock()
		rev, ok := w.checkAt(ctx, held)
		if !ok {
			if !pauseFor(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		from = rev + 1
		w.mu.Lock()
		w.from = from
		w.mu.Unlock()
	}
}

func (w *keyWatcher) deleted(key string, at int64) {
	w.mu.Lock()
	e, ok := w.keys[key]
	// A deletion older than the key's creation is that of an earlier
	// holder of the same key (same lease, same name): not ours.
	ok = ok && at > e.rev
	if ok {
		delete(w.keys, key)
	}
	w.mu.Unlock()
	if ok {
		w.fire(e)
	}
}

func (w *keyWatcher) fire(e *watchedKey) {
	w.s.wg.Add(1)
	go func() {
		defer w.s.wg.Done()
		e.gone()
	}()
}

// check reads keys once and fires for those gone.
func (w *keyWatcher) check(keys map[string]*watchedKey) {
	for attempt := 0; attempt < 3; attempt++ {
		if _, ok := w.checkAt(w.s.ctx, keys); ok {
			return
		}
	}
}

// checkAt reads the namespace's keys (without values) and fires for every
// watched key missing or replaced; it returns the revision read at.
func (w *keyWatcher) checkAt(ctx context.Context, keys map[string]*watchedKey) (int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var resp *clientv3.GetResponse
	var err error
	if len(keys) == 1 {
		for k := range keys {
			resp, err = w.s.cli.Get(ctx, k, clientv3.WithKeysOnly())
		}
	} else {
		resp, err = w.s.cli.Get(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	}
	if err != nil {
		return 0, false
	}
	present := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv.CreateRevision
	}
	for k, e := range keys {
		if present[k] != e.rev {
			w.mu.Lock()
			mine := w.keys[k] == e
			if mine {
				delete(w.keys, k)
			}
			w.mu.Unlock()
			if mine {
				w.fire(e)
			}
		}
	}
	return resp.Header.Revision, true
}

func pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
