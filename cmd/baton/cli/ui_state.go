package cli

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// What `baton ui` shows is built from two watches (the namespace's keys
// and its audit trail), started from a read and resumed from the next
// revision; after a compaction or a dropped watch, it reads again. Lease
// TTLs are the only thing watches cannot tell: each holder's and waiter's
// lease is read when its key appears and again every TTL/3 while a page
// is open (the cadence at which a live holder renews).

// Bounds of what the UI keeps in memory.
const (
	uiMaxSpans    = 2000 // timeline spans, all objects together
	uiMaxAudit    = 500  // newest audit records
	uiLeaseReads  = 16   // lease TTL reads in flight
	uiMinTTLRead  = time.Second
	uiAuditShown  = 200
	uiSpansPerObj = 50
)

// uiKey is one contender key as last seen.
type uiKey struct {
	kind   keys.Kind
	name   string
	lease  int64
	create int64
	value  string
}

// uiLease is what is known of one lease's TTL.
type uiLease struct {
	granted int64     // seconds; 0 until read
	left    int64     // seconds left at read
	readAt  time.Time // when left was read
	reading bool
	gone    bool
}

// uiSpan is one holder's time at the head of a lock or election.
type uiSpan struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  int64  `json:"token"`
	Lease  string `json:"lease"`
	// Start is when the UI saw the hold begin; StartKnown is false for a
	// hold already there when the UI started, with no acquisition record.
	Start      time.Time  `json:"start"`
	StartKnown bool       `json:"start_known"`
	End        *time.Time `json:"end,omitempty"`
	// Cause of the end when known: "released", "lease ended (expired or
	// revoked)", "force-unlocked by …", "not seen (watch resumed)".
	Cause  string `json:"cause,omitempty"`
	endRev int64
}

// uiHolder is one key of a queue as served.
type uiHolder struct {
	Value      string     `json:"value"`
	Token      int64      `json:"token"`
	Lease      string     `json:"lease"`
	Since      *time.Time `json:"since,omitempty"`
	TTLSeconds int64      `json:"ttl_seconds"`
	// TTLLeftMs is the lease's TTL left at the snapshot's time, -1 when
	// not yet known, 0 when the lease is gone.
	TTLLeftMs int64 `json:"ttl_left_ms"`
}

// uiObject is one election or lock: its queue, the holder first.
type uiObject struct {
	Kind  string     `json:"kind"`
	Name  string     `json:"name"`
	Queue []uiHolder `json:"queue"`
}

// uiAudit is one audit record as served.
type uiAudit struct {
	Key       string `json:"key"`
	Malformed string `json:"malformed,omitempty"`
	Raw       string `json:"raw,omitempty"`
	*auditRecord
	rev int64
}

// uiSnapshot is the whole page's data, sent on every change.
type uiSnapshot struct {
	Namespace string     `json:"namespace"`
	Now       time.Time  `json:"now"`
	Started   time.Time  `json:"started"`
	Connected bool       `json:"connected"`
	Problem   string     `json:"problem,omitempty"`
	Revision  int64      `json:"revision"`
	Objects   []uiObject `json:"objects"`
	Spans     []*uiSpan  `json:"spans"`
	Audit     []uiAudit  `json:"audit"`
}

// uiState is the model behind the page. Its methods are safe for
// concurrent use.
type uiState struct {
	ns      string
	cli     *clientv3.Client
	now     func() time.Time
	started time.Time

	mu        sync.Mutex
	keys      map[string]*uiKey
	held      map[string]time.Time // "<kind>/<escaped name>/<lease hex>" → since
	leases    map[int64]*uiLease
	heads     map[string]*uiSpan // open span per "<kind>/<name>"
	spans     []*uiSpan
	audit     []uiAudit
	rev       int64
	watching  [2]bool // namespace, audit
	problem   string
	changed   chan struct{}
	viewers   int
	leaseSlot chan struct{}
}

func newUIState(cli *clientv3.Client, ns string, now func() time.Time) *uiState {
	return &uiState{ns: ns, cli: cli, now: now, started: now(),
		keys: map[string]*uiKey{}, held: map[string]time.Time{}, leases: map[int64]*uiLease{},
		heads: map[string]*uiSpan{}, changed: make(chan struct{}), leaseSlot: make(chan struct{}, uiLeaseReads)}
}

func objID(kind keys.Kind, name string) string { return string(kind) + "/" + name }

// notify wakes every stream; called with mu held.
func (s *uiState) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Changed is closed at the next change.
func (s *uiState) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// run keeps both watches going until ctx ends.
func (s *uiState) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.follow(ctx, 0, keys.NamespacePrefix(s.ns), s.loadKeys, s.applyKeys) }()
	go func() { defer wg.Done(); s.follow(ctx, 1, auditPrefix(s.ns), s.loadAudit, s.applyAudit) }()
	go func() { defer wg.Done(); s.refreshLeases(ctx) }()
	wg.Wait()
}

// follow reads prefix, then watches it from the next revision; on any
// end of the watch it reads again, after a backoff when it failed.
func (s *uiState) follow(ctx context.Context, which int, prefix string,
	load func(*clientv3.GetResponse), apply func([]*clientv3.Event, int64)) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := s.cli.Get(gctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			s.setWatching(which, false, "read "+prefix+": "+err.Error())
			sleepCtx(ctx, waitBackoff(attempt))
			continue
		}
		load(resp)
		s.setWatching(which, true, "")
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(),
			clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				s.setWatching(which, false, "watch "+prefix+": "+err.Error())
				break
			}
			if len(wr.Events) > 0 {
				apply(wr.Events, wr.Header.Revision)
			}
		}
		wcancel()
		if ctx.Err() == nil {
			s.setWatching(which, false, "watch of "+prefix+" ended; reading again")
			sleepCtx(ctx, waitBackoff(min(attempt, 2)))
		}
		attempt = 0
	}
}

func (s *uiState) setWatching(which int, ok bool, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watching[which] = ok
	if ok && s.problem != "" && !s.watching[1-which] {
		return // keep the other watch's problem
	}
	s.problem = problem
	s.notify()
}

// parseHeld takes apart "/<ns>/v1/held/<kind>/<escaped name>/<lease>".
func (s *uiState) heldID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keys.KindPrefix(s.ns, heldKind))
	return rest, ok
}

func (s *uiState) loadKeys(resp *clientv3.GetResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = map[string]*uiKey{}
	s.held = map[string]time.Time{}
	for _, kv := range resp.Kvs {
		s.put(kv)
	}
	s.rev = resp.Header.Revision
	s.transitions(false, resp.Header.Revision, true)
	s.notify()
}

// put records one key; called with mu held.
func (s *uiState) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	if id, ok := s.heldID(key); ok {
		var rec heldRecord
		if json.Unmarshal(kv.Value, &rec) == nil && !rec.Since.IsZero() {
			s.held[id] = rec.Since
		}
		return
	}
	p, err := keys.Parse(s.ns, key)
	if err != nil || (p.Kind != keys.Lock && p.Kind != keys.Election) {
		return
	}
	s.keys[key] = &uiKey{kind: p.Kind, name: p.Name, lease: p.Lease, create: kv.CreateRevision, value: string(kv.Value)}
	if _, ok := s.leases[p.Lease]; !ok {
		s.leases[p.Lease] = &uiLease{}
	}
}

func (s *uiState) applyKeys(evs []*clientv3.Event, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// One response may hold several revisions: each is a transition.
	for i := 0; i < len(evs); {
		r := evs[i].Kv.ModRevision
		// A lease's expiry or revoke deletes its held record in the same
		// revision as its key; a release deletes the key alone.
		heldGone := false
		for ; i < len(evs) && evs[i].Kv.ModRevision == r; i++ {
			ev := evs[i]
			key := string(ev.Kv.Key)
			if ev.Type == clientv3.EventTypePut {
				s.put(ev.Kv)
				continue
			}
			if id, ok := s.heldID(key); ok {
				delete(s.held, id)
				heldGone = true
				continue
			}
			delete(s.keys, key)
		}
		s.transitions(heldGone, r, false)
	}
	s.rev = rev
	s.notify()
}

// transitions closes the span of every object whose head changed and
// opens one for its new head; called with mu held.
func (s *uiState) transitions(heldGone bool, rev int64, resumed bool) {
	now := s.now()
	heads := map[string]*uiKey{}
	for _, k := range s.keys {
		id := objID(k.kind, k.name)
		if h, ok := heads[id]; !ok || k.create < h.create {
			heads[id] = k
		}
	}
	for id, sp := range s.heads {
		h, ok := heads[id]
		if ok && h.create == sp.Token {
			sp.Holder = h.value // a Proclaim
			if since, ok := s.held[string(h.kind)+"/"+keys.Escape(h.name)+"/"+leaseHex(h.lease)]; ok && !sp.StartKnown {
				sp.Start, sp.StartKnown = since, true // its record came after the UI started
			}
			continue
		}
		end := now
		sp.End, sp.endRev = &end, rev
		switch {
		case resumed:
			sp.Cause = "ended while the watch was down"
		case heldGone:
			sp.Cause = "lease ended (expired or revoked)"
		default:
			sp.Cause = "released"
		}
		if a := s.auditAt(rev); a != nil {
			sp.Cause = forcedCause(a)
		}
		delete(s.heads, id)
	}
	for id, h := range heads {
		if _, ok := s.heads[id]; ok {
			continue
		}
		sp := &uiSpan{Kind: string(h.kind), Name: h.name, Holder: h.value, Token: h.create,
			Lease: leaseHex(h.lease), Start: now, StartKnown: !resumed}
		if since, ok := s.held[string(h.kind)+"/"+keys.Escape(h.name)+"/"+leaseHex(h.lease)]; ok && (resumed || since.Before(now)) {
			sp.Start, sp.StartKnown = since, true
		}
		s.heads[id] = sp
		s.spans = append(s.spans, sp)
	}
	if over := len(s.spans) - uiMaxSpans; over > 0 {
		s.spans = append([]*uiSpan(nil), s.spans[over:]...)
	}
}

func (s *uiState) auditAt(rev int64) *uiAudit {
	for i := len(s.audit) - 1; i >= 0; i-- {
		if s.audit[i].rev == rev && s.audit[i].auditRecord != nil {
			return &s.audit[i]
		}
	}
	return nil
}

func forcedCause(a *uiAudit) string {
	who := a.Identity
	if who == "" {
		who = a.OSUser + "@" + a.Host
	}
	return a.Action + " by " + who + ": " + a.Reason
}

func (s *uiState) loadAudit(resp *clientv3.GetResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audit = nil
	for _, kv := range resp.Kvs {
		s.addAudit(kv)
	}
	s.notify()
}

// addAudit keeps one record, newest last, and names the force-unlock as
// the cause of the span that ended in the same revision.
func (s *uiState) addAudit(kv *mvccpb.KeyValue) {
	e := parseAudit(string(kv.Key), kv.Value)
	a := uiAudit{Key: e.Key, Malformed: e.Malformed, Raw: e.Raw, rev: kv.ModRevision}
	if e.Malformed == "" {
		r := e.Record
		a.auditRecord = &r
	}
	s.audit = append(s.audit, a)
	if over := len(s.audit) - uiMaxAudit; over > 0 {
		s.audit = append([]uiAudit(nil), s.audit[over:]...)
	}
	if a.auditRecord == nil {
		return
	}
	for _, sp := range s.spans {
		if sp.endRev == kv.ModRevision && sp.End != nil {
			sp.Cause = forcedCause(&a)
		}
	}
}

func (s *uiState) applyAudit(evs []*clientv3.Event, _ int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypePut {
			s.addAudit(ev.Kv)
		}
	}
	s.notify()
}

// view counts an open page: lease TTLs are read only while one is.
func (s *uiState) view() (done func()) {
	s.mu.Lock()
	s.viewers++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.viewers--
		s.mu.Unlock()
	}
}

// refreshLeases reads the TTL of each lease not yet read, or read more
// than a third of its TTL ago, once a second while a page is open.
func (s *uiState) refreshLeases(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		now := s.now()
		var due []int64
		if s.viewers > 0 {
			live := map[int64]bool{}
			for _, k := range s.keys {
				live[k.lease] = true
			}
			for id, l := range s.leases {
				switch {
				case !live[id]:
					delete(s.leases, id)
				case l.reading || l.gone:
				case l.granted == 0 || now.Sub(l.readAt) >= max(time.Duration(l.granted)*time.Second/3, uiMinTTLRead):
					l.reading = true
					due = append(due, id)
				}
			}
		}
		s.mu.Unlock()
		for _, id := range due {
			select {
			case s.leaseSlot <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-s.leaseSlot }()
				s.readLease(ctx, id)
			}()
		}
	}
}

func (s *uiState) readLease(ctx context.Context, id int64) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.cli.TimeToLive(rctx, clientv3.LeaseID(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return
	}
	l.reading = false
	if err != nil {
		return
	}
	l.readAt = s.now()
	if resp.TTL < 0 {
		l.gone, l.left = true, 0
	} else {
		l.granted, l.left = resp.GrantedTTL, resp.TTL
	}
	s.notify()
}

// snapshot is the page's data now.
func (s *uiState) snapshot() uiSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	snap := uiSnapshot{Namespace: s.ns, Now: now, Started: s.started, Connected: s.watching[0] && s.watching[1],
		Problem: s.problem, Revision: s.rev, Objects: []uiObject{}, Spans: []*uiSpan{}, Audit: []uiAudit{}}
	objs := map[string]*uiObject{}
	var order []*uiKey
	for _, k := range s.keys {
		order = append(order, k)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].create < order[j].create })
	for _, k := range order {
		id := objID(k.kind, k.name)
		o, ok := objs[id]
		if !ok {
			o = &uiObject{Kind: string(k.kind), Name: k.name, Queue: []uiHolder{}}
			objs[id] = o
		}
		h := uiHolder{Value: k.value, Token: k.create, Lease: leaseHex(k.lease), TTLLeftMs: -1}
		if since, ok := s.held[string(k.kind)+"/"+keys.Escape(k.name)+"/"+strconv.FormatInt(k.lease, 16)]; ok {
			h.Since = &since
		}
		if l := s.leases[k.lease]; l != nil && (l.granted > 0 || l.gone) {
			h.TTLSeconds = l.granted
			h.TTLLeftMs = max(0, (time.Duration(l.left)*time.Second - now.Sub(l.readAt)).Milliseconds())
		}
		o.Queue = append(o.Queue, h)
	}
	for _, o := range objs {
		snap.Objects = append(snap.Objects, *o)
	}
	sort.Slice(snap.Objects, func(i, j int) bool {
		a, b := snap.Objects[i], snap.Objects[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	perObj := map[string]int{}
	for i := len(s.spans) - 1; i >= 0; i-- {
		sp := s.spans[i]
		id := sp.Kind + "/" + sp.Name
		if perObj[id] >= uiSpansPerObj {
			continue
		}
		perObj[id]++
		c := *sp
		snap.Spans = append(snap.Spans, &c)
	}
	for i, j := 0, len(snap.Spans)-1; i < j; i, j = i+1, j-1 {
		snap.Spans[i], snap.Spans[j] = snap.Spans[j], snap.Spans[i]
	}
	from := max(0, len(s.audit)-uiAuditShown)
	snap.Audit = append(snap.Audit, s.audit[from:]...)
	return snap
}
