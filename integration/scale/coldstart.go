package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/shard"
)

// ColdConfig sizes the cold-start phase: Members OS processes (the program
// Binary run as "<Binary> child shards ...", as the shards phase's) of a
// group of Shards shards, all started at once on one embedded member
// (fsync on), as a fleet starts when a region recovers or a deployment is
// new. Every shard's fn writes enter and exit through the parent's
// fencing.MemoryGuard, as in the shards phase.
type ColdConfig struct {
	// Binary is the executable run as "<Binary> child shards <args>".
	Binary string
	// Members is the number of member processes, Shards the group's count.
	Members, Shards int
	// TTL is each member's session TTL, whole seconds.
	TTL time.Duration
	// Target is the time from the first start to balanced that the phase
	// checks; Wait bounds the wait (past Target, so that a slow run still
	// says how slow).
	Target, Wait time.Duration
	// Deadline bounds the phase.
	Deadline time.Duration
	// Profile, if set, is a directory each member process writes its CPU
	// profile to (cpu-<member>.pprof).
	Profile string
}

// DefaultColdConfig is the size: 50 processes and 4,096 shards,
// balanced within 60 s.
func DefaultColdConfig() ColdConfig {
	return ColdConfig{Binary: harness.Executable(), Members: 50, Shards: 4096, TTL: 10 * time.Second,
		Target: time.Minute, Wait: 3 * time.Minute, Deadline: 10 * time.Minute}
}

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound.
func (c ColdConfig) Validate() error {
	s := ShardsConfig{Binary: c.Binary, Members: c.Members, Shards: c.Shards, TTL: c.TTL, Rest: c.TTL, Balance: c.Wait, Deadline: c.Deadline}
	var errs []error
	if err := s.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cold: %w", err))
	}
	if c.Target <= 0 || c.Target > c.Wait {
		errs = append(errs, fmt.Errorf("cold: Target must be positive and at most Wait (%v), got %v", c.Wait, c.Target))
	}
	return errors.Join(errs...)
}

// ColdResult is what the cold-start phase measured. Each time is from the
// first process's start to the watch response that showed it (the parent
// follows the group with one watch, as a member does).
type ColdResult struct {
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`

	Members int `json:"members"`
	Shards  int `json:"shards"`
	// LaunchedSeconds is when the last process was started.
	LaunchedSeconds float64 `json:"launched_seconds"`
	// JoinedSeconds is when every member was first live at once.
	JoinedSeconds float64 `json:"joined_seconds"`
	// OwnedSeconds is the time to first full ownership: every shard owned
	// by a live member.
	OwnedSeconds float64 `json:"owned_seconds"`
	// BalancedSeconds is to every member live, every shard owned, each
	// member owning ⌊N/M⌋ or ⌈N/M⌉; 0 if it never was within Wait.
	BalancedSeconds float64 `json:"balanced_seconds"`
	TargetSeconds   float64 `json:"target_seconds"`
	// Revisions is how many etcd revisions the cold start made, to balanced.
	Revisions int64 `json:"revisions"`
	// Joins counts the member keys created to balanced: above Members, the
	// rejoins of members that lost their lease (renewals starved).
	Joins int `json:"joins"`
	// Writes are the namespace's events to balanced, by key.
	Writes ColdWrites `json:"writes"`
	// Moves counts, from etcd's history, the shards whose owner became
	// another member from the first start to balanced (an unowned stretch
	// between them is one move); a shard's first owner is no move.
	Moves         int `json:"moves"`
	HistoryEvents int `json:"history_events"`
	// DoubleHistory, DoubleFenced, FencedWrites, Rejected, ChildErrors,
	// ChildMaxRSS and KeysLeft are as in ShardsResult.
	DoubleHistory int   `json:"double_ownership_history"`
	DoubleFenced  int   `json:"double_ownership_fenced"`
	FencedWrites  int   `json:"fenced_writes"`
	Rejected      int   `json:"rejected"`
	ChildErrors   int   `json:"child_errors"`
	ChildMaxRSS   int64 `json:"child_max_rss_bytes"`
	KeysLeft      int   `json:"keys_left"`
}

// Cold runs the cold-start phase. A failed check is in ColdResult.Failures
// (OK false); an error means the phase could not run.
func Cold(ctx context.Context, cfg ColdConfig, progress io.Writer) (ColdResult, error) {
	if err := cfg.Validate(); err != nil {
		return ColdResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	res := ColdResult{Members: cfg.Members, Shards: cfg.Shards, TargetSeconds: cfg.Target.Seconds()}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	srv, cli, stop, err := phaseMember()
	if err != nil {
		return res, err
	}
	defer stop()
	ledger := &shardsLedger{shards: map[string]*shardsHold{}}
	var rejected int
	var rmu sync.Mutex
	fence, err := startFence(ledger, func(*http.Request) { rmu.Lock(); rejected++; rmu.Unlock() }, nil)
	if err != nil {
		return res, err
	}
	defer fence.close()
	var failures []string
	const group = "cold"
	var sres ShardsResult
	r := &shardsRun{cfg: ShardsConfig{Binary: cfg.Binary, TTL: cfg.TTL}, cli: cli, endpoint: srv.Endpoint(), guardURL: fence.url,
		group: group, count: cfg.Shards, procs: make([]*shardsProc, cfg.Members), failures: &failures, res: &sres}
	for i := range cfg.Members {
		r.members = append(r.members, fmt.Sprintf("m%04d", i))
	}
	if cfg.Profile != "" {
		r.profile = func(member string) string { return filepath.Join(cfg.Profile, "cpu-"+member+".pprof") }
	}
	rev0, err := currentRevision(ctx, cli)
	if err != nil {
		return res, err
	}

	// Every process at once; then the group read every 50 ms.
	t0 := time.Now()
	for i := range r.members {
		if _, err := r.start(ctx, i); err != nil {
			r.stop()
			return res, err
		}
	}
	res.LaunchedSeconds = time.Since(t0).Seconds()
	fmt.Fprintf(progress, "cold: %d member processes of %d shards started in %.2f s\n", cfg.Members, cfg.Shards, res.LaunchedSeconds)
	// The group followed by a watch from before the first start: each
	// figure is the first revision it held at, timed as it arrived.
	wctx, wcancel := context.WithTimeout(ctx, cfg.Wait)
	tr := newColdTracker(shard.GroupPrefix(shardsNamespace, group), cfg.Shards, r.members)
	next := 5 * time.Second // a progress line every 5 s
	var balancedRev int64
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), "/"+shardsNamespace+"/", clientv3.WithPrefix(), clientv3.WithRev(rev0+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			failures = append(failures, fmt.Sprintf("following the group: %v", err))
			break
		}
		tr.apply(wr.Events)
		at := time.Since(t0).Seconds()
		rev := wr.Header.Revision
		if res.JoinedSeconds == 0 && tr.joined() {
			res.JoinedSeconds = at
			fmt.Fprintf(progress, "cold: every member live after %.2f s (revision %d)\n", at, rev)
		}
		if res.OwnedSeconds == 0 && tr.unowned == 0 && tr.joined() {
			res.OwnedSeconds = at
			fmt.Fprintf(progress, "cold: every shard owned by a live member after %.2f s (revision %d: %s)\n", at, rev, tr)
		}
		if time.Since(t0) >= next {
			next += 5 * time.Second
			fmt.Fprintf(progress, "cold: after %.0f s: revision %d: %s, %d joins, writes %+v\n", at, rev, tr, tr.joins, tr.writes)
		}
		if tr.balanced() {
			res.BalancedSeconds, balancedRev = at, rev
			break
		}
	}
	wcancel()
	if balancedRev == 0 {
		failures = append(failures, fmt.Sprintf("%d shards over %d members started at once did not balance within %v (%s)", cfg.Shards, cfg.Members, cfg.Wait, tr))
		if balancedRev, err = currentRevision(context.Background(), cli); err != nil {
			r.stop()
			return res, err
		}
	} else {
		fmt.Fprintf(progress, "cold: balanced after %.2f s, at revision %d\n", res.BalancedSeconds, balancedRev)
		if res.BalancedSeconds > cfg.Target.Seconds() {
			failures = append(failures, fmt.Sprintf("balanced after %.1f s, above the %v target", res.BalancedSeconds, cfg.Target))
		}
	}
	res.Revisions, res.Joins, res.Writes = balancedRev-rev0, tr.joins, tr.writes
	// Every shard's fn writes its enter before the members stop (balanced
	// is the keys' state: a fn taken just before may not have run yet).
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ledger.mu.Lock()
		entered := len(ledger.shards)
		ledger.mu.Unlock()
		if entered >= cfg.Shards {
			break
		}
	}
	r.stop()
	res.ChildMaxRSS, res.ChildErrors = sres.ChildMaxRSS, sres.ChildErrors

	// etcd's history: moves to balanced, owners to every member's exit.
	h, err := replayShards(context.Background(), cli, shard.GroupPrefix(shardsNamespace, group), cfg.Shards, rev0, []int64{rev0, max(rev0, balancedRev)})
	if err != nil {
		return res, fmt.Errorf("cold: reading etcd's history: %w", err)
	}
	res.HistoryEvents, res.Moves, res.DoubleHistory = h.events, h.moves, h.regressions
	failures = append(failures, h.violations...)
	ledger.mu.Lock()
	res.FencedWrites, res.DoubleFenced = ledger.writes, ledger.overlaps
	for name, sh := range ledger.shards {
		if sh.open {
			failures = append(failures, fmt.Sprintf("shard %s: %q never wrote its exit (token %d)", name, sh.member, sh.token))
		}
	}
	unowned := h.notOwners(ledger, group)
	res.DoubleHistory += len(unowned)
	failures = append(failures, stormFirst(unowned, 10)...)
	failures = append(failures, ledger.violations...)
	ledger.mu.Unlock()
	rmu.Lock()
	res.Rejected = rejected
	rmu.Unlock()
	res.DoubleFenced += res.Rejected
	if res.Rejected > 0 {
		failures = append(failures, fmt.Sprintf("the guard rejected %d writes as stale", res.Rejected))
	}
	if res.KeysLeft, err = countKeysLeft(cli, shardsNamespace, &failures); err != nil {
		return res, fmt.Errorf("cold: %w", err)
	}
	res.Failures = stormFirst(failures, 20)
	res.OK = len(res.Failures) == 0
	fmt.Fprintf(progress, "cold: first full ownership %.2f s, balanced %.2f s (target %v), %d moves, %d joins, %d revisions, %d history events; double ownership %d from the history, %d from %d fenced writes; child max RSS %d MiB\n",
		res.OwnedSeconds, res.BalancedSeconds, cfg.Target, res.Moves, res.Joins, res.Revisions, res.HistoryEvents, res.DoubleHistory, res.DoubleFenced, res.FencedWrites, res.ChildMaxRSS>>20)
	return res, nil
}

// coldTracker is the group as a watch shows it: the live members, each
// shard's queue and owner (its oldest key), and how many shards each live
// member owns, kept per event.
type coldTracker struct {
	prefix  string
	want    []string         // the members that should be live
	members map[string]int64 // live member -> its lease
	queues  []map[string]coldKey
	owner   []coldKey      // per shard: its oldest key ("" member: none)
	owns    map[string]int // shards owned by each live member, on its lease
	unowned int            // shards not owned by a live member on its lease
	joins   int            // member keys created
	writes  ColdWrites
}

// ColdWrites counts the events of the phase's namespace by key: the
// group's shard keys put and deleted, its member keys, the sessions'
// fence keys (raised to void an enqueue whose reply was lost or cut short:
// each acquisition cancelled in flight raises one), and any other key.
type ColdWrites struct {
	ShardPuts    int `json:"shard_puts"`
	ShardDeletes int `json:"shard_deletes"`
	Members      int `json:"members"`
	Fences       int `json:"fences"`
	Other        int `json:"other"`
}

type coldKey struct {
	member string
	lease  int64
	rev    int64
}

func newColdTracker(prefix string, count int, want []string) *coldTracker {
	t := &coldTracker{prefix: prefix, want: want, members: map[string]int64{}, queues: make([]map[string]coldKey, count),
		owner: make([]coldKey, count), owns: map[string]int{}, unowned: count}
	for i := range t.queues {
		t.queues[i] = map[string]coldKey{}
	}
	return t
}

// live says whether k is a live member's key on that member's lease.
func (t *coldTracker) live(k coldKey) bool {
	l, ok := t.members[k.member]
	return ok && l == k.lease
}

func (t *coldTracker) count(k coldKey, d int) {
	if t.live(k) {
		t.owns[k.member] += d
	} else {
		t.unowned += d
	}
}

func (t *coldTracker) apply(evs []*clientv3.Event) {
	recount := false
	for _, ev := range evs {
		rest, ok := strings.CutPrefix(string(ev.Kv.Key), t.prefix)
		switch {
		case !ok && strings.Contains(string(ev.Kv.Key), "/v1/session/"):
			t.writes.Fences++
			continue
		case !ok:
			t.writes.Other++
			continue
		case strings.HasPrefix(rest, "m/"):
			t.writes.Members++
		case ev.Type == clientv3.EventTypeDelete:
			t.writes.ShardDeletes++
		default:
			t.writes.ShardPuts++
		}
		if name, ok := strings.CutPrefix(rest, "m/"); ok {
			if ev.Type == clientv3.EventTypeDelete {
				delete(t.members, name)
			} else {
				if ev.Kv.Version == 1 {
					t.joins++
				}
				t.members[name] = ev.Kv.Lease
			}
			recount = true
			continue
		}
		idText, _, _ := strings.Cut(strings.TrimPrefix(rest, "s/"), "/")
		id, err := strconv.Atoi(idText)
		if err != nil || id < 0 || id >= len(t.queues) {
			continue
		}
		q := t.queues[id]
		if ev.Type == clientv3.EventTypeDelete {
			delete(q, string(ev.Kv.Key))
		} else {
			q[string(ev.Kv.Key)] = coldKey{member: string(ev.Kv.Value), lease: ev.Kv.Lease, rev: ev.Kv.CreateRevision}
		}
		var head coldKey
		for _, k := range q {
			if head.rev == 0 || k.rev < head.rev {
				head = k
			}
		}
		if head != t.owner[id] {
			if !recount {
				t.count(t.owner[id], -1)
				t.count(head, 1)
			}
			t.owner[id] = head
		}
	}
	if recount { // the members changed: every count anew
		clear(t.owns)
		t.unowned = 0
		for _, k := range t.owner {
			t.count(k, 1)
		}
	}
}

func (t *coldTracker) joined() bool {
	if len(t.members) != len(t.want) {
		return false
	}
	for _, name := range t.want {
		if _, ok := t.members[name]; !ok {
			return false
		}
	}
	return true
}

func (t *coldTracker) balanced() bool {
	if t.unowned != 0 || !t.joined() {
		return false
	}
	n, m := len(t.owner), len(t.want)
	for _, name := range t.want {
		if c := t.owns[name]; c != n/m && c != (n+m-1)/m {
			return false
		}
	}
	return true
}

func (t *coldTracker) String() string {
	lo, hi := len(t.owner), 0
	for name := range t.members {
		lo, hi = min(lo, t.owns[name]), max(hi, t.owns[name])
	}
	if len(t.members) == 0 {
		lo = 0
	}
	return fmt.Sprintf("%d live members, %d unowned, %d to %d shards each", len(t.members), t.unowned, lo, hi)
}
