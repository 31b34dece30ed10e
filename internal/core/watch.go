package core

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
)

// keyWatcher tells the holds of one session under one namespace when their
// keys are deleted: one watch serves every key, so 10,000 held locks cost
// one watch, not 10,000.
//
// A key is registered after the acquisition confirmed it at revision at.
// A deletion after at must reach its hold whatever the watch was doing
// then, so every registration checks the one window the stream cannot
// cover: when the stream started after at, or broke and was re-read after
// at, the key is read once. Keys whose acquisition is under way are
// expected, so a deletion of one seen before registration is kept, not
// dropped.
type keyWatcher struct {
	s      *Session
	prefix string
	cancel context.CancelFunc

	mu   sync.Mutex
	keys map[string]*Hold
	// expected holds keys being acquired: a deletion seen before
	// registration is recorded (at its revision) instead of dropped.
	expected map[string]int64
	// from is the first revision the current stream delivers; keys
	// confirmed before it are read once on registration.
	from int64
	// linger stops an idle watch later; uses counts registrations.
	linger *time.Timer
	uses   int
}

func (s *Session) watcher(key string) *keyWatcher {
	prefix := keys.NamespaceOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = make(map[string]*keyWatcher)
	}
	w, ok := s.watchers[prefix]
	if !ok {
		w = &keyWatcher{s: s, prefix: prefix, keys: make(map[string]*Hold), expected: make(map[string]int64)}
		s.watchers[prefix] = w
	}
	return w
}

// expect marks key as being acquired; call before the acquisition's
// confirming read. unexpect undoes it.
func (w *keyWatcher) expect(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.expected[key] = 0
	}
}

func (w *keyWatcher) unexpect(key string) {
	w.mu.Lock()
	delete(w.expected, key)
	w.mu.Unlock()
}

// register ends h (once, in the watch's goroutine or the caller's) when
// key, created at h.rev and confirmed present at revision h.at, is deleted
// or replaced; unregister undoes it.
func (w *keyWatcher) register(key string, h *Hold) {
	rev, at := h.rev, h.at
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
		h.gone(deletedAt)
		return
	case !wasExpected || w.from > at+1:
		// The stream may not have delivered a deletion after at with the
		// key expected: read once.
		check = true
	}
	w.mu.Unlock()
	if check {
		w.checkOnce(key, h)
	}
}

func (w *keyWatcher) unregister(key string, h *Hold) {
	{
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.keys[key] == h {
			delete(w.keys, key)
		}
		// Keep the watch a TTL after the last key goes when this session
		// holds again and again; give it up at once after a single hold, so
		// that drained waiters do not each keep receiving the namespace's
		// deletions.
		switch {
		case len(w.keys) > 0 || len(w.expected) > 0 || w.cancel == nil || w.linger != nil:
		case w.uses < 2:
			w.cancel()
			w.cancel = nil
		default:
			w.linger = time.AfterFunc(DefaultTTL, func() { w.stopIfIdle() })
		}
	}
}

// stopLinger cancels a pending idle stop (the session is closing).
func (w *keyWatcher) stopLinger() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
}

// stopIfIdle ends the watch when no key is held or expected; it reports
// whether it did.
func (w *keyWatcher) stopIfIdle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	if len(w.keys) > 0 || len(w.expected) > 0 || w.cancel == nil {
		return false
	}
	w.cancel()
	w.cancel = nil
	return true
}

// start runs the watch loop from revision from; w.mu is held.
func (w *keyWatcher) start(from int64) {
	w.s.mu.Lock()
	closed := w.s.closed
	if !closed {
		w.s.wg.Add(1)
	}
	w.s.mu.Unlock()
	if closed {
		return
	}
	ctx, cancel := context.WithCancel(w.s.ctx)
	w.cancel, w.from = cancel, from
	go func() {
		defer w.s.wg.Done()
		w.loop(ctx, from)
	}()
}

func (w *keyWatcher) loop(ctx context.Context, from int64) {
	cli := w.s.cli
	for ctx.Err() == nil {
		// Watch from the current revision, which etcd serves at once: a start
		// revision already past waits up to 100 ms in etcd's unsynced set,
		// and a holder must hear of its deletion within a round trip. When
		// the revision moved on since from, one read covers the gap.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created {
				if wr.Header.Revision >= from {
					if _, ok := w.reread(ctx); !ok {
						break
					}
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					w.deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
				}
			}
		}
		cancel()
		if ctx.Err() != nil || w.stopIfIdle() {
			return
		}
		// The stream broke (compaction, no leader, connection lost): read
		// what is held, then watch again.
		call(w.s.cfg.Hooks.BeforeReread)
		rev, ok := w.reread(ctx)
		if !ok {
			if retry.Sleep(ctx, 100*time.Millisecond) != nil || w.stopIfIdle() {
				return
			}
			continue
		}
		from = rev + 1
	}
}

// deleted ends the hold of key, if it was created before the deletion, in
// this goroutine: the hold's context ends in the same step that receives
// the event.
func (w *keyWatcher) deleted(key string, at int64) {
	w.mu.Lock()
	if _, ok := w.expected[key]; ok {
		w.expected[key] = at
	}
	h, ok := w.keys[key]
	ok = ok && at > h.rev // an older deletion is of an earlier holder of this key
	if ok {
		delete(w.keys, key)
	}
	w.mu.Unlock()
	if ok {
		h.gone(at)
	}
	if f := w.s.cfg.Hooks.Deleted; f != nil {
		f(key)
	}
}

// reread reads the namespace's keys and ends the holds whose keys are gone:
// those registered before the read, including any registered while the
// stream was down. It returns the revision read at.
func (w *keyWatcher) reread(ctx context.Context) (int64, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := w.s.cli.Get(rctx, w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return 0, false
	}
	rev := resp.Header.Revision
	present := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = kv.CreateRevision
	}
	var gone []*Hold
	w.mu.Lock()
	for k, h := range w.keys {
		if h.at < rev && present[k] != h.rev {
			delete(w.keys, k)
			gone = append(gone, h)
		}
	}
	// Expected keys: a deletion during the outage cannot be told from the
	// key not yet created; their registration reads them.
	for k := range w.expected {
		delete(w.expected, k)
	}
	w.from = rev + 1
	w.mu.Unlock()
	for _, h := range gone {
		h.gone(rev)
	}
	return rev, true
}

// checkOnce reads key (a few attempts) and ends its hold if it is gone.
func (w *keyWatcher) checkOnce(key string, h *Hold) {
	for attempt := 0; attempt < 3; attempt++ {
		ctx, cancel := context.WithTimeout(w.s.ctx, 2*time.Second)
		resp, err := w.s.cli.Get(ctx, key, clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == h.rev {
			return
		}
		w.mu.Lock()
		mine := w.keys[key] == h
		if mine {
			delete(w.keys, key)
		}
		w.mu.Unlock()
		if mine {
			h.gone(resp.Header.Revision)
		}
		return
	}
}
