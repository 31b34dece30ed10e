// Package watch is a session's one watch stream: a watch of its own on
// every key the session puts or holds and on every key one of its waiters
// waits for, all on one etcd gRPC watch stream that one goroutine reads. A
// deletion reaches the session whose key it was and the waiter behind it,
// and no other session, however many share the namespace.
package watch

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// A released key's watch stays open for linger, at most maxLinger of them,
// for the next acquisition of the same key (the same name through the same
// lease), once that key was released twice.
const (
	linger    = 15 * time.Second
	maxLinger = 64
)

// A broken stream is opened again after reconnectPause, doubling up to
// maxReconnectPause while new streams break at once (no leader, say: each
// new stream re-sends a create per hold); one that ran a while (steady)
// is opened again at once.
const (
	reconnectPause    = 100 * time.Millisecond
	maxReconnectPause = 2 * time.Second
	steady            = 2 * time.Second
)

// chunk bounds the keys one gap read reads (etcd's default --max-txn-ops
// is 128).
const chunk = 64

// New returns the stream of a session; it connects on first use.
func New[H comparable](c *Config[H]) *Stream[H] {
	return &Stream[H]{c: c, holds: make(map[int64]H)}
}

// Config is what the stream needs of its session; H is its hold type.
type Config[H comparable] struct {
	Client *clientv3.Client
	// Ctx ends the stream (the session's Close); Go runs a goroutine the
	// session waits for, false once it is closing.
	Ctx context.Context
	Go  func(fn func()) bool
	// Key and Rev (CreateRevision) read a hold; Gone tells it its key is
	// gone, in the step that receives the deletion.
	Key  func(H) string
	Rev  func(H) int64
	Gone func(H)
	// Hooks are test hooks (nil: none), each read when called.
	Hooks *Hooks
}

// Hooks are pause points that tests use to force an interleaving of the
// stream at an exact step; production code leaves them nil.
type Hooks struct {
	StreamEnded   func()           // a stream ended (broken or stopped), before its waiters are told
	BeforeGapRead func()           // before the stream reads the keys of holds whose watch began after they were confirmed
	Established   func()           // a stream is up: the watches waiting for it go out
	Deleted       func(key string) // for every deletion the stream delivers
	Followed      func(ok bool)    // a wait watched the keys ahead (ok: false once closing), before it waits
}

func (c *Config[H]) hooks() *Hooks {
	if c.Hooks == nil {
		return &Hooks{}
	}
	return c.Hooks
}

// Stream is the session's watches, each of one key, on one gRPC stream.
// Their IDs are the stream's own (etcd lets a client choose them), so a
// watch is known by its ID from the moment its create is sent. Every
// watch runs from the revision current when etcd creates it, which etcd
// serves at once: a watch from a past revision waits up to 100 ms for
// etcd's catch-up, and a holder would hear of an operator's delete after
// the waiter that the same deletion let in.
type Stream[H comparable] struct {
	c *Config[H]

	mu      sync.Mutex
	gen     int                // the running loop's: a stopped loop's news is ignored
	cancel  context.CancelFunc // ends the running loop; nil: none runs
	conn    *conn              // the established gRPC stream; nil: none yet
	nextID  int64
	holds   map[int64]H       // watch ID → the hold whose key it watches
	keys    map[int64]*key    // watch ID → a key being acquired (Expect)
	unsent  map[int64]int64   // holds whose watch goes out with the next stream: ID → the revision their key was known present at (0: unknown)
	pending map[int64]int64   // holds whose watch is sent, not yet known to tell every deletion after that revision
	checks  []int64           // holds whose watch began after that revision: a read finds a deletion between
	reading bool              // a goroutine reads the gaps
	follows map[int64]*follow // watch ID → a key a waiter waits for
	idle    map[string]*idle  // a released key's watch, by key, kept for its next acquisition
	sweep   *time.Timer       // ends idle watches past linger
	recent  recent            // the keys released last: only a key released again keeps its watch
}

// recent is the last maxLinger keys whose watch ended with their release.
type recent struct {
	set  map[string]struct{}
	ring []string
	next int
}

// again says whether k was released lately, and notes that it was now.
func (r *recent) again(k string) bool {
	if _, ok := r.set[k]; ok {
		return true
	}
	if r.set == nil {
		r.set = make(map[string]struct{}, maxLinger)
	}
	if len(r.ring) < maxLinger {
		r.ring = append(r.ring, k)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = k
		r.next = (r.next + 1) % maxLinger
	}
	r.set[k] = struct{}{}
	return false
}

// key is a key being acquired, watched from before its enqueue, so that
// its hold needs no read to cover the time before its watch began.
type key struct {
	key     string
	sent    bool  // its create went out on the current stream
	created int64 // the revision its watch began after; 0: not known yet
	deleted int64 // the last deletion it delivered
	waiter  func(Note)
}

// follow is one key a waiter waits for.
type follow struct {
	key  string
	f    func(Note)
	sent bool // its create went out on the current stream (else it goes with the next)
}

// idle is the watch of a key no one holds or acquires, on the stream it
// was made on: it has told every deletion of the key since before its last
// acquisition's confirming revision.
type idle struct {
	id      int64
	conn    *conn
	since   time.Time
	deleted int64 // the last deletion it delivered
}

// Note is what a waiter is told, serially and with the stream's lock held
// (so f must only note and signal).
type Note struct {
	Kind Kind
	Key  string
	Rev  int64 // Created: every deletion after Rev will be told; Deleted: the deletion's revision
	Err  error // Ended: why etcd refused the watch, if it did
}

// Kind is what happened to a followed key.
type Kind uint8

const (
	Created Kind = iota + 1 // the key's watch runs
	Deleted                 // the key was deleted
	Ended                   // nothing more is told: the stream broke, or etcd refused the watch
)

// conn is one gRPC watch stream and the creates it has not answered yet:
// etcd answers creates in order, and a refused one with ID -1.
type conn struct {
	ws     etcdserverpb.Watch_WatchClient
	cancel context.CancelFunc

	sendMu sync.Mutex         // one sender at a time (gRPC's rule)
	queued map[int64]struct{} // publish's creates not sent yet: an end before its create sends neither
	fifoMu sync.Mutex         // not held while sending: the reader pops it
	fifo   []int64
}

// noPut is every watch's filter: deletions only.
var noPut = []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT}

// create sends a watch of key from the current revision; one of
// publish's (queued) only if no end came first: etcd ignores the cancel
// of a watch it does not know, and would run the later create for ever.
func (c *conn) create(id int64, key string, queued bool) {
	req := &etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: &etcdserverpb.WatchCreateRequest{
		Key: []byte(key), WatchId: id, Filters: noPut}}}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if queued {
		if _, ok := c.queued[id]; !ok {
			return // ended before it went out
		}
		delete(c.queued, id)
	}
	c.fifoMu.Lock()
	c.fifo = append(c.fifo, id)
	c.fifoMu.Unlock()
	_ = c.ws.Send(req) // a failed send broke the stream: its reader reconnects
}

func (c *conn) end(id int64) {
	req := &etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CancelRequest{CancelRequest: &etcdserverpb.WatchCancelRequest{WatchId: id}}}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if _, ok := c.queued[id]; ok {
		delete(c.queued, id) // its create is not sent either
		return
	}
	_ = c.ws.Send(req)
}

// answered pops the oldest create not answered yet: the one etcd answers.
func (c *conn) answered() int64 {
	c.fifoMu.Lock()
	defer c.fifoMu.Unlock()
	if len(c.fifo) == 0 {
		return clientv3.InvalidWatchID
	}
	id := c.fifo[0]
	c.fifo = c.fifo[1:]
	if len(c.fifo) == 0 {
		c.fifo = nil
	}
	return id
}

// Expect watches k, about to be put (or adopted), before its enqueue is
// sent: the watch then tells every deletion of the key's new incarnation.
// The returned ID goes to Register once the key holds, or to Unexpect.
func (s *Stream[H]) Expect(k string) int64 {
	s.mu.Lock()
	if s.keys == nil {
		s.keys = make(map[int64]*key)
	}
	if w := s.idle[k]; w != nil && s.conn != nil && w.conn == s.conn {
		delete(s.idle, k)
		s.keys[w.id] = &key{key: k, sent: true, created: 1, deleted: w.deleted} // ran before its last acquisition
		s.mu.Unlock()
		return w.id
	}
	s.nextID++
	id := s.nextID
	c := s.conn
	s.keys[id] = &key{key: k, sent: c != nil}
	if c == nil {
		s.run()
	}
	s.mu.Unlock()
	if c != nil {
		c.create(id, k, false)
	}
	return id
}

// Unexpect ends the watch of an acquisition that failed; it stays open a
// while for the key's next acquisition.
func (s *Stream[H]) Unexpect(id int64) {
	s.mu.Lock()
	e := s.keys[id]
	if e == nil {
		s.mu.Unlock()
		return
	}
	delete(s.keys, id)
	s.release(id, e.key, e.sent, e.sent && e.created > 0, e.deleted)
}

// Register makes h, whose key was confirmed present at revision at, the
// holder of watch id (Expect's): a deletion of its key after at ends it. A
// deletion between at and the start of a watch that began later (the
// stream broke meanwhile) is found by a read.
func (s *Stream[H]) Register(h H, id, at int64) {
	s.mu.Lock()
	e := s.keys[id]
	if e == nil { // closing
		s.mu.Unlock()
		return
	}
	delete(s.keys, id)
	s.holds[id] = h
	switch {
	case e.deleted > s.c.Rev(h): // deleted after it was created
		delete(s.holds, id)
		s.release(id, e.key, e.sent, e.sent && e.created > 0, e.deleted)
		s.c.Gone(h)
		return
	case !e.sent:
		if s.unsent == nil {
			s.unsent = make(map[int64]int64)
		}
		s.unsent[id] = at
	case e.created == 0:
		if s.pending == nil {
			s.pending = make(map[int64]int64)
		}
		s.pending[id] = at
	case e.created > at:
		if s.pending == nil {
			s.pending = make(map[int64]int64)
		}
		s.pending[id] = at
		s.check(id)
	}
	s.mu.Unlock()
}

// Unregister stops the news of h's key; the watch of a key released
// again and again stays open a while for its next acquisition (at most
// maxLinger such), else it ends now, before the release that deletes the
// key is sent.
func (s *Stream[H]) Unregister(h H, id int64) {
	s.mu.Lock()
	if s.holds[id] != h {
		s.mu.Unlock()
		return
	}
	delete(s.holds, id)
	_, unsent := s.unsent[id]
	_, pending := s.pending[id]
	delete(s.unsent, id)
	delete(s.pending, id)
	s.release(id, s.c.Key(h), !unsent, !unsent && !pending, 0)
}

// release keeps the watch id of key k idle (covered: it has told every
// deletion since before its last acquisition) or ends it (if sent on the
// current stream); s.mu is held, and released. Only a key released again
// within the last maxLinger releases keeps it: an idle watch receives its
// own key's release, an event a key taken once need not cost.
func (s *Stream[H]) release(id int64, k string, sent, covered bool, deleted int64) {
	c := s.conn
	keep := c != nil && covered && s.recent.again(k) && len(s.idle) < maxLinger && s.idle[k] == nil
	if keep {
		if s.idle == nil {
			s.idle = make(map[string]*idle)
		}
		s.idle[k] = &idle{id: id, conn: c, since: time.Now(), deleted: deleted}
		if s.sweep == nil {
			s.sweep = time.AfterFunc(linger, s.sweepIdle)
		}
	}
	s.settle()
	s.mu.Unlock()
	if c != nil && !keep && sent {
		c.end(id)
	}
}

// Reset ends the current gRPC stream, and every watch on it at once: for
// the end of a lease, whose holds' watches would each be cancelled (a
// storm's 100,000 cancels reaching the member with the re-acquisitions).
// What still needs watching is watched anew on the next stream.
func (s *Stream[H]) Reset() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// sweepIdle ends the idle watches past linger.
func (s *Stream[H]) sweepIdle() {
	s.mu.Lock()
	s.sweep = nil
	var ids []int64
	c := s.conn
	next := time.Duration(0)
	for k, w := range s.idle {
		if d := time.Since(w.since); d >= linger || w.conn != c {
			delete(s.idle, k)
			if w.conn == c {
				ids = append(ids, w.id)
			}
		} else if next == 0 || linger-d < next {
			next = linger - d
		}
	}
	if next > 0 {
		s.sweep = time.AfterFunc(next, s.sweepIdle)
	}
	s.settle()
	s.mu.Unlock()
	for _, id := range ids {
		c.end(id)
	}
}

// StopLinger ends the idle watches' timer (the session is closing).
func (s *Stream[H]) StopLinger() {
	s.mu.Lock()
	if s.sweep != nil {
		s.sweep.Stop()
		s.sweep = nil
	}
	s.mu.Unlock()
}

// Follow watches keys for a waiter whose own key is watch own (Expect's):
// f is told Created once each key's watch runs (the caller covers what
// came between its read and that revision), Deleted for each deletion of
// those keys and of its own after that, and Ended if the stream breaks or
// etcd refuses a watch (the caller reads again). stop ends the watches.
func (s *Stream[H]) Follow(own int64, keys []string, f func(Note)) (stop func()) {
	ids := make([]int64, len(keys))
	s.mu.Lock()
	if s.follows == nil {
		s.follows = make(map[int64]*follow)
	}
	c := s.conn
	for i, k := range keys {
		s.nextID++
		ids[i] = s.nextID
		s.follows[ids[i]] = &follow{key: k, f: f, sent: c != nil}
	}
	ok := true
	if c == nil && !s.run() { // closing
		ok = false
		for _, id := range ids {
			delete(s.follows, id)
		}
		f(Note{Kind: Ended})
	} else if e := s.keys[own]; e != nil {
		e.waiter = f
		if e.deleted > 0 { // before Follow: the waiter judges it by its read
			f(Note{Kind: Deleted, Key: e.key, Rev: e.deleted})
		}
	}
	s.mu.Unlock()
	if c != nil {
		for i, id := range ids {
			c.create(id, keys[i], false)
		}
	}
	if f := s.c.hooks().Followed; f != nil {
		f(ok)
	}
	return func() {
		s.mu.Lock()
		var live []int64
		for _, id := range ids {
			if fw := s.follows[id]; fw != nil {
				delete(s.follows, id)
				if fw.sent {
					live = append(live, id)
				}
			}
		}
		if e := s.keys[own]; e != nil {
			e.waiter = nil
		}
		c := s.conn
		s.settle()
		s.mu.Unlock()
		if c != nil {
			for _, id := range live {
				c.end(id)
			}
		}
	}
}

// run starts the loop if none runs; false once the session is closing.
// s.mu is held.
func (s *Stream[H]) run() bool {
	if s.cancel != nil {
		return true
	}
	ctx, cancel := context.WithCancel(s.c.Ctx)
	s.gen++
	gen := s.gen
	if !s.c.Go(func() { s.loop(ctx, gen) }) {
		cancel()
		return false
	}
	s.cancel = cancel
	return true
}

// settle stops the loop once nothing is held, acquired, followed or kept;
// s.mu is held. A stopped loop's news is ignored from here on (gen).
func (s *Stream[H]) settle() {
	if s.cancel == nil || len(s.holds) > 0 || len(s.keys) > 0 || len(s.follows) > 0 || len(s.idle) > 0 {
		return
	}
	s.cancel()
	s.cancel, s.conn = nil, nil
	s.gen++
	if s.sweep != nil {
		s.sweep.Stop()
		s.sweep = nil
	}
}

// errBroken paces the reconnection after a stream broke.
var errBroken = errors.New("watch stream broken")

// loop opens the stream, reads it until it breaks, and opens it again
// until the session closes or nothing is watched.
func (s *Stream[H]) loop(ctx context.Context, gen int) {
	_ = retry.Loop(ctx, reconnectPause, maxReconnectPause, func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithCancel(retry.Leader(ctx))
		ws, err := etcdserverpb.NewWatchClient(s.c.Client.ActiveConnection()).Watch(cctx, grpc.WaitForReady(true))
		if err != nil {
			cancel()
			return ctx.Err() != nil, err
		}
		c := &conn{ws: ws, cancel: cancel}
		if !s.publish(gen, c) {
			cancel()
			return true, nil
		}
		began := time.Now()
		for {
			resp, err := ws.Recv()
			if err != nil {
				break
			}
			s.dispatch(gen, c, resp)
		}
		cancel()
		call(s.c.hooks().StreamEnded)
		if s.broken(gen, c) || ctx.Err() != nil {
			return true, nil
		}
		if time.Since(began) >= steady {
			return false, nil
		}
		return false, errBroken
	}, nil)
	s.ended(gen)
}

// ended tells the waiters of loop gen, ended with the session, that
// nothing more will come.
func (s *Stream[H]) ended(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	for id, fw := range s.follows {
		delete(s.follows, id)
		fw.f(Note{Kind: Ended, Key: fw.key})
	}
	s.cancel, s.conn = nil, nil
}

// publish makes c the stream of loop gen: the watches waiting for one go
// out. False if the loop was stopped.
func (s *Stream[H]) publish(gen int, c *conn) bool {
	type item struct {
		id  int64
		key string
	}
	s.mu.Lock()
	if gen != s.gen {
		s.mu.Unlock()
		return false
	}
	s.conn = c
	var now []item
	for id, at := range s.unsent {
		now = append(now, item{id, s.c.Key(s.holds[id])})
		if s.pending == nil {
			s.pending = make(map[int64]int64)
		}
		s.pending[id] = at
	}
	s.unsent = nil
	for id, e := range s.keys {
		if !e.sent {
			e.sent = true
			now = append(now, item{id, e.key})
		}
	}
	for id, fw := range s.follows {
		if !fw.sent {
			fw.sent = true
			now = append(now, item{id, fw.key})
		}
	}
	if len(now) > 0 {
		c.queued = make(map[int64]struct{}, len(now)) // c is not shared before s.mu is released
		for _, it := range now {
			c.queued[it.id] = struct{}{}
		}
	}
	s.mu.Unlock()
	call(s.c.hooks().Established)
	send := func() {
		for _, it := range now {
			c.create(it.id, it.key, true)
		}
	}
	// Few creates go from here; many from a goroutine of their own: this
	// one must read the stream while etcd answers them.
	if len(now) <= 16 || !s.c.Go(send) {
		send()
	}
	return true
}

// broken ends loop gen's stream c: its waiters are told; its holds and
// keys being acquired are watched anew with the next stream, each held
// key read again; its idle watches are gone. True when the loop must stop
// (stopped, or nothing left to watch).
func (s *Stream[H]) broken(gen int, c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return true
	}
	if s.conn == c {
		s.conn = nil
	}
	for id, fw := range s.follows {
		if fw.sent && !planted.On("p") { // p: its waiter left waiting for a watch that ended
			delete(s.follows, id)
			fw.f(Note{Kind: Ended, Key: fw.key})
		}
	}
	for _, e := range s.keys {
		if e.sent {
			e.sent, e.created = false, 0
			if e.waiter != nil && !planted.On("p") {
				e.waiter(Note{Kind: Ended, Key: e.key})
			}
		}
	}
	for id := range s.holds {
		if _, ok := s.unsent[id]; !ok {
			if s.unsent == nil {
				s.unsent = make(map[int64]int64)
			}
			s.unsent[id] = 0 // unknown: read once the new watch runs
		}
	}
	s.pending, s.checks = nil, nil
	clear(s.idle)
	before := s.cancel
	s.settle()
	return s.cancel == nil && before != nil
}

// dispatch applies one response of loop gen's stream c: a create's
// answer, a watch etcd ended, or deletions, each ending the hold of its
// key in this step.
func (s *Stream[H]) dispatch(gen int, c *conn, resp *etcdserverpb.WatchResponse) {
	var gone []H
	var ends []int64
	s.mu.Lock()
	if gen != s.gen || s.conn != c {
		s.mu.Unlock()
		return
	}
	id := resp.WatchId
	switch {
	case resp.Created:
		if sent := c.answered(); resp.Canceled {
			id = sent // etcd answers a refused create with ID -1
		}
		s.created(id, resp, c)
	case resp.Canceled: // by etcd: compacted past it while it lagged
		if fw := s.follows[id]; fw != nil {
			delete(s.follows, id)
			fw.f(Note{Kind: Ended, Key: fw.key})
		} else if _, held := s.holds[id]; held || s.keys[id] != nil {
			c.cancel() // watched anew with the next stream
		} else {
			for k, w := range s.idle {
				if w.id == id && w.conn == c { // no longer tells: not to be reused
					delete(s.idle, k)
					s.settle()
					break
				}
			}
		}
	default:
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.DELETE {
				continue
			}
			k, at := string(ev.Kv.Key), ev.Kv.ModRevision
			switch h, held := s.holds[id]; {
			case held:
				if at > s.c.Rev(h) { // an older deletion is of an earlier incarnation
					delete(s.holds, id)
					delete(s.pending, id)
					gone = append(gone, h)
					if s.idle == nil {
						s.idle = make(map[string]*idle)
					}
					if s.idle[k] == nil && len(s.idle) < maxLinger { // ended with the stream, or by the next acquisition
						s.idle[k] = &idle{id: id, conn: c, since: time.Now(), deleted: at}
						if s.sweep == nil {
							s.sweep = time.AfterFunc(linger, s.sweepIdle)
						}
					} else {
						ends = append(ends, id)
					}
				}
			case s.keys[id] != nil:
				e := s.keys[id]
				e.deleted = max(e.deleted, at)
				if e.waiter != nil {
					e.waiter(Note{Kind: Deleted, Key: k, Rev: at})
				}
			case s.follows[id] != nil:
				s.follows[id].f(Note{Kind: Deleted, Key: k, Rev: at})
			default:
				if w := s.idle[k]; w != nil && w.id == id {
					w.deleted = max(w.deleted, at)
				}
			}
		}
	}
	if len(ends) > 0 {
		s.settle()
	}
	s.mu.Unlock()
	for _, id := range ends {
		c.end(id)
	}
	for _, h := range gone {
		s.c.Gone(h)
	}
	if f := s.c.hooks().Deleted; f != nil {
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				f(string(ev.Kv.Key))
			}
		}
	}
}

// created applies etcd's answer to the create of watch id; s.mu is held.
func (s *Stream[H]) created(id int64, resp *etcdserverpb.WatchResponse, c *conn) {
	rev := resp.Header.Revision
	if fw := s.follows[id]; fw != nil {
		if resp.Canceled {
			delete(s.follows, id)
			err := refusal(resp.CancelReason)
			fw.f(Note{Kind: Ended, Key: fw.key, Err: err})
			if !retry.Permanent(err) {
				c.cancel() // an expired auth token, say: the next stream carries the current one
			}
		} else {
			fw.f(Note{Kind: Created, Key: fw.key, Rev: rev})
		}
		return
	}
	_, held := s.holds[id]
	e := s.keys[id]
	switch {
	case resp.Canceled && (held || e != nil):
		c.cancel() // refused: watched anew with the next stream
	case e != nil:
		e.created = rev
	case held:
		at, p := s.pending[id]
		switch {
		case !p:
		case rev <= at:
			delete(s.pending, id) // it began before any deletion after at
		default:
			s.check(id)
		}
	}
}

// check has the gap of pending hold id read; s.mu is held.
func (s *Stream[H]) check(id int64) {
	s.checks = append(s.checks, id)
	s.read()
}

// read starts the gap reader of the current stream if checks wait and
// none runs; s.mu is held.
func (s *Stream[H]) read() {
	if c, gen := s.conn, s.gen; !s.reading && c != nil && len(s.checks) > 0 && s.c.Go(func() { s.readGaps(gen, c) }) {
		s.reading = true
	}
}

// doneReading ends stream c's gap reader; the checks of a stream that
// replaced c (queued while it ran) get a reader of their own. s.mu is held.
func (s *Stream[H]) doneReading(c *conn) {
	s.reading = false
	if s.conn != c {
		s.read()
	}
}

// readGaps reads, in transactions of point reads, the keys of the pending
// holds whose watch began after the revision their key was known present
// at, and ends those whose key went meanwhile; the others are covered from
// there on. A failed read breaks c, and the next stream watches them anew.
func (s *Stream[H]) readGaps(gen int, c *conn) {
	call(s.c.hooks().BeforeGapRead)
	for {
		s.mu.Lock()
		if gen != s.gen || s.conn != c || len(s.checks) == 0 {
			s.doneReading(c)
			s.mu.Unlock()
			return
		}
		batch := s.checks[:min(len(s.checks), chunk)]
		s.checks = s.checks[len(batch):]
		if len(s.checks) == 0 {
			s.checks = nil
		}
		ops := make([]clientv3.Op, 0, len(batch))
		var ids []int64
		for _, id := range batch {
			if h, ok := s.holds[id]; ok {
				ids = append(ids, id)
				ops = append(ops, clientv3.OpGet(s.c.Key(h), clientv3.WithKeysOnly()))
			}
		}
		s.mu.Unlock()
		if len(ops) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(s.c.Ctx, 2*time.Second)
		resp, err := s.c.Client.Txn(retry.Leader(ctx)).Then(ops...).Commit() // linearizable: after every watch's start
		cancel()
		if err != nil {
			c.cancel()
			s.mu.Lock()
			s.doneReading(c)
			s.mu.Unlock()
			return
		}
		var gone []H
		var ended []int64
		s.mu.Lock()
		if gen != s.gen || s.conn != c {
			s.doneReading(c)
			s.mu.Unlock()
			return
		}
		for i, id := range ids {
			h, ok := s.holds[id]
			if _, p := s.pending[id]; !ok || !p {
				continue // unregistered meanwhile
			}
			delete(s.pending, id)
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == s.c.Rev(h) {
				continue
			}
			delete(s.holds, id)
			gone, ended = append(gone, h), append(ended, id)
		}
		s.settle()
		s.mu.Unlock()
		for _, h := range gone {
			s.c.Gone(h)
		}
		for _, id := range ended {
			c.end(id)
		}
	}
}

// refusal is the error of a create etcd refused.
func refusal(reason string) error {
	if reason == rpctypes.ErrGRPCPermissionDenied.Error() {
		return rpctypes.ErrPermissionDenied
	}
	return errors.New("etcd refused the watch: " + reason)
}

func call(f func()) {
	if f != nil {
		f()
	}
}
