package hold

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// Events of lock and elect, printed on stderr: a line each, or with -o json
// one JSON object each.
const (
	eventWaiting     = "waiting"
	eventUnreachable = "unreachable"
	eventAcquired    = "acquired"
	eventLost        = "lost"
	eventReleased    = "released"
)

// event is one status event; fields not relevant to it are left out of
// the JSON.
type event struct {
	Event string `json:"event"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	// waiting: the holder (lock) or leader (election) and the queue ahead.
	Holder  string `json:"holder,omitempty"`
	Token   int64  `json:"token,omitempty"`
	HeldFor *int64 `json:"held_for_seconds,omitempty"`
	Ahead   *int   `json:"ahead,omitempty"`
	// acquired: this process's hold.
	Value string `json:"value,omitempty"`
	Key   string `json:"key,omitempty"`
	Lease string `json:"lease,omitempty"`
	TTL   int64  `json:"ttl_seconds,omitempty"`
	// unreachable, lost: why.
	Error string `json:"error,omitempty"`
	// release-requested: why, and who asked.
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// statusWriter prints the events of one lock or election; it is safe for
// the waiting-status goroutine and the command's own to share.
type statusWriter struct {
	w    io.Writer
	json bool
	kind string // "lock" or "election"
	name string

	mu          sync.Mutex
	lastWaiting string
	unreachable bool
}

func newStatusWriter(w io.Writer, asJSON bool, kind, name string) *statusWriter {
	return &statusWriter{w: w, json: asJSON, kind: kind, name: name}
}

func (s *statusWriter) emit(e event, text string) {
	e.Kind, e.Name = s.kind, s.name
	if s.json {
		_ = cmdutil.WriteJSONLine(s.w, e)
		return
	}
	fmt.Fprintf(s.w, "baton: %s\n", text)
}

func (s *statusWriter) what() string { return fmt.Sprintf("%s %q", s.kind, s.name) }

// queueState is the holder and the queue ahead of this process.
type queueState struct {
	holder  string
	token   int64
	heldFor time.Duration // < 0: unknown
	ahead   int
}

// waiting prints the state of the queue if it changed since last printed
// (the time held alone is no change).
func (s *statusWriter) waiting(q queueState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := fmt.Sprintf("%q/%d/%d", q.holder, q.token, q.ahead)
	if id == s.lastWaiting && !s.unreachable {
		return
	}
	s.lastWaiting, s.unreachable = id, false
	verb := "held by"
	if s.kind == "election" {
		verb = "led by"
	}
	e := event{Event: eventWaiting, Holder: q.holder, Token: q.token, Ahead: &q.ahead}
	held := ""
	if q.heldFor >= 0 {
		secs := int64(q.heldFor / time.Second)
		e.HeldFor = &secs
		held = " for " + q.heldFor.Round(time.Second).String()
	}
	s.emit(e, fmt.Sprintf("waiting for %s: %s %q (token %d)%s, %d ahead", s.what(), verb, q.holder, q.token, held, q.ahead))
}

// unreachableNow prints, once per outage, that etcd did not answer and
// the wait goes on.
func (s *statusWriter) unreachableNow(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unreachable {
		return
	}
	s.unreachable = true
	s.emit(event{Event: eventUnreachable, Error: err.Error()},
		fmt.Sprintf("etcd unreachable, still waiting for %s: %v", s.what(), oneLine(err)))
}

func (s *statusWriter) acquired(v HeldView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastWaiting, s.unreachable = "", false
	if s.json {
		v.Event = eventAcquired
		_ = WriteHeld(s.w, true, v)
		return
	}
	fmt.Fprint(s.w, "baton: ")
	_ = WriteHeld(s.w, false, v)
}

// lost reports a loss; as a line only if baton goes on (final: the error
// is about to be printed as baton exits).
func (s *statusWriter) lost(err error, final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if final && !s.json {
		return
	}
	s.emit(event{Event: eventLost, Error: err.Error()}, oneLine(err)+"; campaigning again")
}

func (s *statusWriter) released() {
	s.mu.Lock()
	defer s.mu.Unlock()
	verb := "released lock"
	if s.kind == "election" {
		verb = "resigned from election"
	}
	s.emit(event{Event: eventReleased}, fmt.Sprintf("%s %q", verb, s.name))
}

// oneLine keeps an error on one status line: control and format
// characters (a name or an etcd message could carry any) are shown
// escaped, as safeMessage does.
func oneLine(err error) string { return cmdutil.SafeMessage(err.Error()) }

// watchQueue prints the waiting status until ctx ends: at once, then each
// time the queue under prefix changes (and every few seconds, which also
// notices an outage and its end). read returns the current state; ok false
// means nothing to report (the lock is free, or this process leads).
func watchQueue(ctx context.Context, cli *clientv3.Client, prefix string, s *statusWriter,
	read func(ctx context.Context) (q queueState, ok bool, err error)) {
	const every = 5 * time.Second
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wch:
			if !ok {
				wch = nil
			}
			// Let a burst of changes settle into one read.
			if !cmdutil.Sleep(ctx, 20*time.Millisecond) {
				return
			}
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		q, ok, err := read(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.unreachableNow(err)
		case ok:
			s.waiting(q)
		}
		t.Reset(every)
	}
}
