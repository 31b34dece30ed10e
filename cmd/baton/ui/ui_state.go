package ui

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/router"
)

// What `baton ui` shows is built from two watches (the namespace's keys
// and its audit trail), started from a read and resumed from the next
// revision; after a compaction or a dropped watch, it reads again. Lease
// TTLs are the only thing watches cannot tell: each holder's and waiter's
// lease is read when its key appears and again every TTL/3 while a page
// is open (the cadence at which a live holder renews).
//
// A watch says nothing while etcd is gone (the client retries it
// silently), so the page's "live" rests on a probe: a linearizable read
// with a short deadline every uiProbeEvery. It costs one ReadIndex round
// trip to the leader and no write, and, unlike a watch progress request
// that the member answers alone, fails when the member has no quorum
// (BenchmarkUILivenessProbe compares the two). When a probe fails, the
// page says since when etcd is unreachable and what it shows is greyed
// out; when one succeeds again, both watches read afresh.
//
// Shard groups are read with shard.Inspect when the namespace watch shows
// a change to their keys (ui_shards.go): no watch of their own.

// Bounds of what the UI keeps in memory.
const (
	uiMaxSpans    = 2000 // timeline spans, all objects together
	uiMaxAudit    = 500  // newest audit records
	uiLeaseReads  = 16   // lease TTL reads in flight
	uiMinTTLRead  = time.Second
	uiAuditShown  = 200
	uiSpansPerObj = 50
	ProbeEvery    = time.Second
	ProbeWithin   = time.Second
	uiRetryEvery  = time.Second // connecting while etcd is down
)

// uiKey is one contender key as last seen.
type uiKey struct {
	key    string
	kind   keys.Kind
	name   string
	tag    string // keys.TagRead or TagWrite for a read/write lock
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

// Span is one holder's time at the head of a lock or election.
type Span struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Mode is "read" or "write" for a read/write lock, empty otherwise.
	Mode   string `json:"mode,omitempty"`
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
	Value string `json:"value"`
	// Mode is "read" or "write" for a read/write lock, empty otherwise.
	Mode string `json:"mode,omitempty"`
	// Holding is true for the keys that hold (the head of a lock or
	// election, up to the limit of a semaphore, the writer or the first
	// readers of a read/write lock), false for waiters.
	Holding    bool       `json:"holding"`
	Token      int64      `json:"token"`
	Lease      string     `json:"lease"`
	Since      *time.Time `json:"since,omitempty"`
	TTLSeconds int64      `json:"ttl_seconds"`
	// TTLLeftMs is the lease's TTL left at the snapshot's time, -1 when
	// not yet known, 0 when the lease is gone.
	TTLLeftMs int64 `json:"ttl_left_ms"`
	// Priority and Version are an election candidate's (ui_candidates.go).
	Priority int    `json:"priority,omitempty"`
	Version  string `json:"version,omitempty"`
	// Set names the other locks a mutex set's key was taken with, under
	// the same token (ui_lockstate.go).
	Set []string `json:"set,omitempty"`
	// Release is a release request pending to this holder.
	Release *uiRelease `json:"release,omitempty"`
}

// Object is one election, lock, semaphore or read/write lock: its
// queue in arrival order, the holders first.
type Object struct {
	Kind  string     `json:"kind"`
	Name  string     `json:"name"`
	Queue []uiHolder `json:"queue"`
	// Holders and Waiters count the queue's keys that hold and wait.
	Holders int `json:"holders"`
	Waiters int `json:"waiters"`
	// Limit is a semaphore's stored limit, 0 when unknown.
	Limit int `json:"limit,omitempty"`
	// Readers and Writer say who holds a read/write lock.
	Readers int  `json:"readers,omitempty"`
	Writer  bool `json:"writer,omitempty"`
	// Strategy is an election's: "oldest" or "preferred".
	Strategy string `json:"strategy,omitempty"`
	// Delays are the lock-delays running on it (lost holders' delays).
	Delays []uiDelay `json:"delays,omitempty"`
}

// uiAudit is one audit record as served.
type uiAudit struct {
	Key       string `json:"key"`
	Malformed string `json:"malformed,omitempty"`
	Raw       string `json:"raw,omitempty"`
	*keyspace.AuditRecord
	rev int64
}

// Snapshot is the whole page's data, sent on every change.
type Snapshot struct {
	Namespace string    `json:"namespace"`
	Now       time.Time `json:"now"`
	Started   time.Time `json:"started"`
	Connected bool      `json:"connected"`
	Problem   string    `json:"problem,omitempty"`
	// Unreachable is true while etcd does not answer the probe; DownSince
	// is when it stopped answering, and AsOf when it last answered: what
	// the page shows is etcd's state as of then, not now.
	Unreachable bool       `json:"unreachable"`
	DownSince   *time.Time `json:"down_since,omitempty"`
	AsOf        *time.Time `json:"as_of,omitempty"`
	Revision    int64      `json:"revision"`
	Objects     []Object   `json:"objects"`
	Spans       []*Span    `json:"spans"`
	Audit       []uiAudit  `json:"audit"`
	// Shards are the namespace's shard groups, ShardMoves the newest moves
	// seen, oldest first (ui_shards.go).
	Shards     []ShardGroup `json:"shards"`
	ShardMoves []ShardMove  `json:"shard_moves"`
}

// State is the model behind the page. Its methods are safe for
// concurrent use.
type State struct {
	ns      string
	cli     *clientv3.Client
	connect func(context.Context) (*clientv3.Client, error) // when cli is nil
	now     func() time.Time
	started time.Time

	mu        sync.Mutex
	keys      map[string]*uiKey
	cands     map[string]*uiCand       // election candidate records, by key
	delays    map[string]*uiDelayRec   // running lock-delays, by marker key
	releases  map[string]*uiReleaseRec // pending release requests, by key
	limits    map[string]int           // semaphore name → stored limit
	held      map[string]time.Time     // "<kind>/<escaped name>/<lease hex>" → since
	leases    map[int64]*uiLease
	heads     map[string]*Span // open span per holding contender key
	spans     []*Span
	audit     []uiAudit
	shards    uiShards
	rev       int64
	watching  [2]bool // namespace, audit
	problem   string
	changed   chan struct{}
	viewers   int
	leaseSlot chan struct{}
	downSince time.Time     // zero while etcd answers the probe
	asOf      time.Time     // last answer
	resync    chan struct{} // closed when etcd answers again after an outage
}

func NewState(cli *clientv3.Client, ns string, now func() time.Time) *State {
	return &State{ns: ns, cli: cli, now: now, started: now(),
		keys: map[string]*uiKey{}, limits: map[string]int{}, held: map[string]time.Time{}, leases: map[int64]*uiLease{},
		heads: map[string]*Span{}, changed: make(chan struct{}), leaseSlot: make(chan struct{}, uiLeaseReads),
		resync: make(chan struct{})}
}

func objID(kind keys.Kind, name string) string { return string(kind) + "/" + name }

// notify wakes every stream; called with mu held.
func (s *State) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Changed is closed at the next change.
func (s *State) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Run keeps both watches and the probe going until ctx ends; without a
// client, it first connects, as often as uiRetryEvery, showing why it
// cannot meanwhile. It returns a refusal (permission, authentication) that
// retrying would not mend, after showing it.
func (s *State) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); s.refreshLeases(ctx) }()
	for s.cli == nil {
		cli, err := s.connect(ctx)
		if ctx.Err() != nil {
			if cli != nil {
				_ = cli.Close()
			}
			return nil
		}
		if err != nil {
			s.setReachable(false, err.Error())
			if cmdutil.ExitCode(err) != cmdutil.ExitUnavailable {
				return err
			}
			cmdutil.Sleep(ctx, uiRetryEvery)
			continue
		}
		s.mu.Lock()
		s.cli = cli
		s.mu.Unlock()
		// Closed once the watches and the probe are done with it.
		wg.Add(1)
		go func() { defer wg.Done(); <-ctx.Done(); _ = cli.Close() }()
	}
	wg.Add(4)
	go func() { defer wg.Done(); s.probe(ctx) }()
	go func() { defer wg.Done(); s.inspectShards(ctx) }()
	go func() { defer wg.Done(); s.follow(ctx, 0, keys.NamespacePrefix(s.ns), s.loadKeys, s.applyKeys) }()
	go func() { defer wg.Done(); s.follow(ctx, 1, keyspace.AuditPrefix(s.ns), s.loadAudit, s.applyAudit) }()
	return nil
}

// probe asks etcd, with a linearizable read, whether it answers, every
// uiProbeEvery, each within uiProbeWithin.
func (s *State) probe(ctx context.Context) {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		start := s.now()
		pctx, cancel := context.WithTimeout(ctx, ProbeWithin)
		_, err := s.cli.Get(pctx, keys.NamespacePrefix(s.ns), clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, router.ErrIdentity):
			s.setReachableAt(false, err.Error(), start) // another cluster answers: nothing to vouch for
		case err != nil && !cmdutil.IsDenied(err):
			s.setReachableAt(false, "", start)
		default:
			s.setReachableAt(true, "", start) // it answered, if only to refuse: the watches say what they cannot read
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *State) setReachable(ok bool, why string) { s.setReachableAt(ok, why, s.now()) }

// setReachableAt records a probe's answer (ok) or its silence, started at
// t; detail, when set, says why etcd cannot be used.
func (s *State) setReachableAt(ok bool, detail string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.asOf = s.now()
		if s.downSince.IsZero() {
			return
		}
		s.downSince, s.problem = time.Time{}, ""
		close(s.resync) // the watches may have missed anything: read again
		s.resync = make(chan struct{})
	} else {
		if !s.downSince.IsZero() && (detail == "" || detail == s.problem) {
			return
		}
		if s.downSince.IsZero() {
			s.downSince = t
		}
		if detail != "" {
			s.problem = detail
		}
	}
	s.notify()
}

// follow reads prefix, then watches it from the next revision; on any
// end of the watch it reads again, after a backoff when it failed.
func (s *State) follow(ctx context.Context, which int, prefix string,
	load func(*clientv3.GetResponse), apply func([]*clientv3.Event, int64)) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := s.cli.Get(gctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			s.setWatching(which, false, "read "+prefix+": "+err.Error())
			cmdutil.Sleep(ctx, cmdutil.WaitBackoff(attempt))
			continue
		}
		load(resp)
		s.setWatching(which, true, "")
		s.mu.Lock()
		resync := s.resync
		s.mu.Unlock()
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(),
			clientv3.WithRev(resp.Header.Revision+1))
	watch:
		for {
			select {
			case <-resync:
				break watch
			case wr, ok := <-wch:
				if !ok {
					break watch
				}
				if err := wr.Err(); err != nil {
					s.setWatching(which, false, "watch "+prefix+": "+err.Error())
					break watch
				}
				if len(wr.Events) > 0 {
					apply(wr.Events, wr.Header.Revision)
				}
			}
		}
		wcancel()
		if ctx.Err() == nil {
			s.setWatching(which, false, "watch of "+prefix+" ended; reading again")
			cmdutil.Sleep(ctx, cmdutil.WaitBackoff(min(attempt, 2)))
		}
		attempt = 0
	}
}

func (s *State) setWatching(which int, ok bool, problem string) {
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
func (s *State) heldID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keys.KindPrefix(s.ns, keyspace.HeldKind))
	return rest, ok
}

func (s *State) loadKeys(resp *clientv3.GetResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = map[string]*uiKey{}
	s.cands = map[string]*uiCand{}
	s.delays = map[string]*uiDelayRec{}
	s.releases = map[string]*uiReleaseRec{}
	s.limits = map[string]int{}
	s.held = map[string]time.Time{}
	for _, kv := range resp.Kvs {
		s.put(kv)
	}
	s.rev = resp.Header.Revision
	s.reloadShards(resp.Kvs)
	s.transitions(false, resp.Header.Revision, true)
	s.notify()
}

// put records one key; called with mu held.
func (s *State) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	if id, ok := s.heldID(key); ok {
		var rec keyspace.HeldRecord
		if json.Unmarshal(kv.Value, &rec) == nil && !rec.Since.IsZero() {
			s.held[id] = rec.Since
		}
		return
	}
	if s.putCand(key, kv.Value, kv.CreateRevision) || s.putLockState(key, kv.Value, kv.Lease) {
		return
	}
	if name, ok := keyspace.LimitKeyName(s.ns, key); ok {
		if n, err := strconv.Atoi(string(kv.Value)); err == nil && n > 0 {
			s.limits[name] = n
		}
		return
	}
	p, tag, err := keys.ParseTagged(s.ns, key)
	if err != nil {
		return
	}
	switch {
	case (p.Kind == keys.Lock || p.Kind == keys.Election) && tag == "":
	case p.Kind == keys.Lock && tag == keys.TagSet: // a mutex set's key holds like a plain one
	case p.Kind == keys.Semaphore && tag == keys.TagPermit:
	case p.Kind == keys.RWLock && (tag == keys.TagRead || tag == keys.TagWrite):
	default:
		return // not a contender key baton writes
	}
	s.keys[key] = &uiKey{key: key, kind: p.Kind, name: p.Name, tag: tag, lease: p.Lease, create: kv.CreateRevision, value: string(kv.Value)}
	if _, ok := s.leases[p.Lease]; !ok {
		s.leases[p.Lease] = &uiLease{}
	}
}

func (s *State) applyKeys(evs []*clientv3.Event, rev int64) {
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
			s.noteShard(key)
			if ev.Type == clientv3.EventTypePut {
				s.put(ev.Kv)
				continue
			}
			if id, ok := s.heldID(key); ok {
				delete(s.held, id)
				heldGone = true
				continue
			}
			if name, ok := keyspace.LimitKeyName(s.ns, key); ok {
				delete(s.limits, name)
				continue
			}
			if s.deleteCand(key) || s.deleteLockState(key) {
				continue
			}
			delete(s.keys, key)
		}
		s.transitions(heldGone, r, false)
	}
	s.rev = rev
	s.notify()
}

// queues groups the contender keys by object, each in arrival order.
func (s *State) queues() map[string][]*uiKey {
	qs := map[string][]*uiKey{}
	for _, k := range s.keys {
		id := objID(k.kind, k.name)
		qs[id] = append(qs[id], k)
	}
	for _, q := range qs {
		sort.Slice(q, func(i, j int) bool { return q[i].create < q[j].create })
	}
	return qs
}

// holders is how many of a queue's oldest keys hold, by the rule baton
// locks counts by (keyspace.Holding), the libraries' own; a semaphore's
// limit is the stored one, unknown (every key holds) until read.
func (s *State) holders(q []*uiKey) int {
	if len(q) == 0 {
		return 0
	}
	size := 0
	for _, k := range q {
		size += len(k.key)
	}
	// The rule reads etcd's KeyValues: one backing array each for the
	// values, the pointers and the keys' bytes.
	buf := make([]byte, 0, size)
	vals := make([]mvccpb.KeyValue, len(q))
	kvs := make([]*mvccpb.KeyValue, len(q))
	for i, k := range q {
		buf = append(buf, k.key...)
		vals[i] = mvccpb.KeyValue{Key: buf[len(buf)-len(k.key):], CreateRevision: k.create}
		kvs[i] = &vals[i]
	}
	return keyspace.Holding(q[0].kind, s.limits[q[0].name], kvs)
}

func modeOf(tag string) string {
	switch tag {
	case keys.TagRead:
		return "read"
	case keys.TagWrite:
		return "write"
	}
	return ""
}

func (s *State) heldSince(k *uiKey) (time.Time, bool) {
	t, ok := s.held[string(k.kind)+"/"+keys.Escape(k.name)+"/"+cmdutil.LeaseHex(k.lease)]
	return t, ok
}

// transitions closes the span of every key that stopped holding and opens
// one for every key that began; called with mu held.
func (s *State) transitions(heldGone bool, rev int64, resumed bool) {
	now := s.now()
	holding := map[string]*uiKey{}
	for _, q := range s.queues() {
		for _, k := range q[:s.holders(q)] {
			holding[k.key] = k
		}
	}
	for key, sp := range s.heads {
		h, ok := holding[key]
		if ok && h.create == sp.Token {
			sp.Holder = h.value // a Proclaim
			if since, ok := s.heldSince(h); ok && !sp.StartKnown {
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
		delete(s.heads, key)
	}
	var opened []*uiKey
	for key, h := range holding {
		if _, ok := s.heads[key]; !ok {
			opened = append(opened, h)
		}
	}
	sort.Slice(opened, func(i, j int) bool { return opened[i].create < opened[j].create })
	for _, h := range opened {
		sp := &Span{Kind: string(h.kind), Name: h.name, Mode: modeOf(h.tag), Holder: h.value, Token: h.create,
			Lease: cmdutil.LeaseHex(h.lease), Start: now, StartKnown: !resumed}
		if since, ok := s.heldSince(h); ok && (resumed || since.Before(now)) {
			sp.Start, sp.StartKnown = since, true
		}
		s.heads[h.key] = sp
		s.spans = append(s.spans, sp)
	}
	s.pruneSpans()
}

// pruneSpans keeps at most uiSpansPerObj finished spans per object (the
// page shows no more) and uiMaxSpans in all, the oldest going first.
func (s *State) pruneSpans() {
	if len(s.spans) <= uiMaxSpans+uiMaxSpans/8 {
		return // prune in batches, not on every transition
	}
	per := map[string]int{}
	kept := s.spans[:0:0]
	for i := len(s.spans) - 1; i >= 0; i-- {
		sp := s.spans[i]
		id := sp.Kind + "/" + sp.Name
		if sp.End != nil && (per[id] >= uiSpansPerObj || len(kept) >= uiMaxSpans) {
			continue
		}
		per[id]++
		kept = append(kept, sp)
	}
	slices.Reverse(kept)
	s.spans = kept
}

func (s *State) auditAt(rev int64) *uiAudit {
	for i := len(s.audit) - 1; i >= 0; i-- {
		if s.audit[i].rev == rev && s.audit[i].AuditRecord != nil && s.audit[i].Action != keyspace.ActionRequestRelease {
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

func (s *State) loadAudit(resp *clientv3.GetResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audit = nil
	kvs := slices.Clone(resp.Kvs)
	slices.SortStableFunc(kvs, func(a, b *mvccpb.KeyValue) int {
		return strings.Compare(keyspace.AuditOrder(s.ns, string(a.Key)), keyspace.AuditOrder(s.ns, string(b.Key)))
	})
	for _, kv := range kvs {
		s.addAudit(kv)
	}
	s.notify()
}

// addAudit keeps one record, newest last, and names the force-unlock as
// the cause of the span that ended in the same revision.
func (s *State) addAudit(kv *mvccpb.KeyValue) {
	e := keyspace.ParseAudit(string(kv.Key), kv.Value)
	a := uiAudit{Key: e.Key, Malformed: e.Malformed, Raw: e.Raw, rev: kv.ModRevision}
	if e.Malformed == "" {
		r := e.Record
		a.AuditRecord = &r
	}
	s.audit = append(s.audit, a)
	if over := len(s.audit) - uiMaxAudit; over > 0 {
		s.audit = append([]uiAudit(nil), s.audit[over:]...)
	}
	if a.AuditRecord == nil || a.Action == keyspace.ActionRequestRelease { // a request ends no hold
		return
	}
	for _, sp := range s.spans {
		if sp.endRev == kv.ModRevision && sp.End != nil {
			sp.Cause = forcedCause(&a)
		}
	}
}

func (s *State) applyAudit(evs []*clientv3.Event, _ int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypePut {
			s.addAudit(ev.Kv)
		}
	}
	s.notify()
}

// View counts an open page: lease TTLs are read only while one is.
func (s *State) View() (done func()) {
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
func (s *State) refreshLeases(ctx context.Context) {
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
		// Leases of keys gone are dropped whether or not a page is open;
		// TTLs are read only while one is.
		live := make(map[int64]bool, len(s.keys))
		for _, k := range s.keys {
			live[k.lease] = true
		}
		for _, c := range s.cands {
			live[c.lease] = true
		}
		for _, d := range s.delays {
			live[d.lease] = true
		}
		for id, l := range s.leases {
			switch {
			case !live[id]:
				delete(s.leases, id)
			case s.viewers == 0 || s.cli == nil || l.reading || l.gone:
			case l.granted == 0 || now.Sub(l.readAt) >= max(time.Duration(l.granted)*time.Second/3, uiMinTTLRead):
				l.reading = true
				due = append(due, id)
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

func (s *State) readLease(ctx context.Context, id int64) {
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
func (s *State) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	down := !s.downSince.IsZero() || s.cli == nil
	snap := Snapshot{Namespace: s.ns, Now: now, Started: s.started, Connected: !down && s.watching[0] && s.watching[1],
		Problem: s.problem, Revision: s.rev, Objects: []Object{}, Spans: []*Span{}, Audit: []uiAudit{}, Unreachable: down}
	if down {
		since := s.downSince
		if since.IsZero() {
			since = s.started
		}
		snap.DownSince = &since
		snap.Problem = "etcd unreachable since " + since.Format("15:04:05")
		if s.problem != "" {
			snap.Problem += ": " + s.problem
		}
	}
	if !s.asOf.IsZero() {
		asOf := s.asOf
		snap.AsOf = &asOf
	}
	qs := s.queues()
	sets := s.setMembersByToken()
	ttl := func(lease int64) int64 { return s.uiHolderOf(lease, now).TTLLeftMs }
	for _, q := range qs {
		k0 := q[0]
		n := s.holders(q)
		o := Object{Kind: string(k0.kind), Name: k0.name, Queue: make([]uiHolder, 0, len(q)), Holders: n, Waiters: len(q) - n}
		if k0.kind == keys.Semaphore {
			o.Limit = s.limits[k0.name]
		}
		if k0.kind == keys.RWLock {
			if k0.tag == keys.TagWrite {
				o.Writer = true
			} else {
				o.Readers = n
			}
		}
		for i, k := range q {
			h := s.uiHolderOf(k.lease, now)
			h.Value, h.Mode, h.Holding, h.Token = k.value, modeOf(k.tag), i < n, k.create
			if since, ok := s.heldSince(k); ok {
				h.Since = &since
			}
			o.Queue = append(o.Queue, h)
		}
		if k0.kind == keys.Election {
			s.candidates(&o, q, func(lease int64) uiHolder { return s.uiHolderOf(lease, now) })
		}
		s.addLockState(&o, q, sets, ttl)
		snap.Objects = append(snap.Objects, o)
	}
	for _, name := range s.candOnlyNames(qs) {
		o := Object{Kind: string(keys.Election), Name: name, Queue: []uiHolder{}}
		s.candidates(&o, nil, func(lease int64) uiHolder { return s.uiHolderOf(lease, now) })
		s.addLockState(&o, nil, sets, ttl)
		snap.Objects = append(snap.Objects, o)
	}
	for _, o := range s.delayOnlyObjects(qs) {
		if o.Kind == string(keys.Election) {
			o.Strategy = "oldest"
		}
		s.addLockState(&o, nil, sets, ttl)
		snap.Objects = append(snap.Objects, o)
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
	s.addShards(&snap)
	return snap
}

// uiHolderOf is a queue entry with its lease's TTL; called with mu held.
func (s *State) uiHolderOf(lease int64, now time.Time) uiHolder {
	h := uiHolder{Lease: cmdutil.LeaseHex(lease), TTLLeftMs: -1}
	if l := s.leases[lease]; l != nil && (l.granted > 0 || l.gone) {
		h.TTLSeconds = l.granted
		h.TTLLeftMs = max(0, (time.Duration(l.left)*time.Second - now.Sub(l.readAt)).Milliseconds())
	}
	return h
}
