package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/shard"
)

// ShardsConfig sizes the shards phase: Members OS processes (the program
// Binary run as "<Binary> child shards ...") join a group of Shards shards
// on one embedded member (fsync on); once balanced they rest for Rest, and
// then each is restarted in turn (SIGTERM, its exit, a new process of the
// same member name), the group balanced again before the next. Every
// shard's fn writes enter when it starts and exit when its ctx ends
// through the parent's fencing.MemoryGuard, one resource per shard. A
// first group of RestShards shards over as many members rests for Rest
// too, without the restarts: the cost at rest of a small group beside the
// large one's.
type ShardsConfig struct {
	// Binary is the executable run as "<Binary> child shards <args>"; its
	// child command must call Child.
	Binary string
	// Members is the number of member processes.
	Members int
	// Shards is the large group's count (1 to shard.MaxCount), RestShards
	// the small one's (0: no small group).
	Shards, RestShards int
	// TTL is each member's session TTL, whole seconds.
	TTL time.Duration
	// Rest is how long the requests at rest are counted, Settle the pause
	// before, once balanced.
	Rest, Settle time.Duration
	// Balance bounds each wait for the group to balance.
	Balance time.Duration
	// Deadline bounds the phase.
	Deadline time.Duration
}

// DefaultShardsConfig is the full size: 4,096 shards over 50 processes,
// beside 256 at rest, TTL 10 s.
func DefaultShardsConfig() ShardsConfig {
	return ShardsConfig{Binary: harness.Executable(), Members: 50, Shards: 4096, RestShards: 256, TTL: 10 * time.Second,
		Rest: 10 * time.Second, Settle: 2 * time.Second, Balance: time.Minute, Deadline: 20 * time.Minute}
}

// shardsMemPerChild is what one member process is allowed in the memory
// check; shardsFDsPerChild what it costs the parent in descriptors.
const (
	shardsMemPerChild = 64 << 20
	shardsFDsPerChild = 16
)

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound.
func (c ShardsConfig) Validate() error {
	var errs []error
	if err := harness.CheckBinary("shards", c.Binary); err != nil {
		errs = append(errs, err)
	}
	if c.Members < 2 {
		errs = append(errs, fmt.Errorf("shards: Members must be at least 2, got %d", c.Members))
	}
	if c.Shards < 1 || c.Shards > shard.MaxCount {
		errs = append(errs, fmt.Errorf("shards: Shards must be 1 to %d, got %d", shard.MaxCount, c.Shards))
	}
	if c.RestShards < 0 || c.RestShards > shard.MaxCount {
		errs = append(errs, fmt.Errorf("shards: RestShards must be 0 to %d, got %d", shard.MaxCount, c.RestShards))
	}
	errs = append(errs, checkTTL("shards", c.TTL))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Rest", c.Rest}, {"Balance", c.Balance}, {"Deadline", c.Deadline}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("shards: %s must be positive, got %v", d.name, d.v))
		}
	}
	if c.Rest > 0 && c.Rest < c.TTL/3 {
		// Shorter than a renewal's period, the window may see none.
		errs = append(errs, fmt.Errorf("shards: Rest must be at least TTL/3 (%v), got %v", c.TTL/3, c.Rest))
	}
	if c.Settle < 0 {
		errs = append(errs, fmt.Errorf("shards: Settle must not be negative, got %v", c.Settle))
	}
	if c.Members > 0 {
		fds, mem := harness.Limits()
		if fds > 0 && uint64(c.Members*shardsFDsPerChild)+procFDsBase > fds {
			errs = append(errs, fmt.Errorf("shards: Members must be at most %d under the file-descriptor limit %d, got %d", (fds-min(fds, procFDsBase))/shardsFDsPerChild, fds, c.Members))
		}
		if mem > 0 && uint64(c.Members)*shardsMemPerChild > mem {
			errs = append(errs, fmt.Errorf("shards: Members must be at most %d with %d MiB available, got %d", mem/shardsMemPerChild, mem>>20, c.Members))
		}
	}
	return errors.Join(errs...)
}

// ShardsResult is what the shards phase measured.
type ShardsResult struct {
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`

	Members    int `json:"members"`
	Shards     int `json:"shards"`
	RestShards int `json:"rest_shards"`
	// RestSmall and RestLarge are the requests the member answered per
	// member process per second at rest, RestShards and Shards shards
	// over Members: unary calls and messages received on streams (lease
	// renewals, watch requests). RestRatio is RestLarge / RestSmall.
	RestSmall RestCost `json:"rest_small"`
	RestLarge RestCost `json:"rest_large"`
	RestRatio float64  `json:"rest_ratio"`
	// StartSeconds is from the first process's start to the large group
	// balanced, the members joining one at a time.
	StartSeconds float64 `json:"start_seconds"`
	// Restarts is how many processes were restarted; RestartSeconds each
	// one's SIGTERM to the group balanced again (p50, p99, max).
	Restarts       int     `json:"restarts"`
	RestartP50     float64 `json:"restart_p50_seconds"`
	RestartP99     float64 `json:"restart_p99_seconds"`
	RestartMax     float64 `json:"restart_max_seconds"`
	RestartSeconds float64 `json:"rolling_restart_seconds"`
	// Moves counts, from etcd's history of the group's keys, the shards
	// whose owner became another member during the rolling restart (an
	// unowned stretch between them is one move); MovesBound is 2.2 × N,
	// MaxMovesPerRestart the most one restart caused.
	Moves              int `json:"moves"`
	MovesBound         int `json:"moves_bound"`
	MaxMovesPerRestart int `json:"max_moves_per_restart"`
	HistoryEvents      int `json:"history_events"`
	// DoubleHistory counts, from etcd's history, a shard owner whose
	// token was not above every earlier owner's and a fenced enter by a
	// token etcd never made the shard's owner. DoubleFenced counts enters
	// while another owner of the shard had not written its exit, and
	// writes the guard rejected as stale.
	DoubleHistory int `json:"double_ownership_history"`
	DoubleFenced  int `json:"double_ownership_fenced"`
	FencedWrites  int `json:"fenced_writes"`
	Rejected      int `json:"rejected"`
	// ChildErrors counts errors the member processes reported; KeysLeft
	// the keys under the phase's namespace after every process exited.
	ChildErrors int   `json:"child_errors"`
	ChildMaxRSS int64 `json:"child_max_rss_bytes"`
	KeysLeft    int   `json:"keys_left"`
}

// RestCost is what a group at rest costs the member.
type RestCost struct {
	// PerMemberSecond is requests per member process per second; Unary
	// and Stream are the window's unary calls and stream messages.
	PerMemberSecond float64 `json:"per_member_second"`
	Unary           float64 `json:"unary"`
	Stream          float64 `json:"stream"`
	Seconds         float64 `json:"seconds"`
}

// shardsNamespace holds the phase's keys.
const shardsNamespace = "scale-shards"

// shardsLedger checks the fenced writes, per shard: an enter after the
// previous owner's exit and with a greater token, an exit by the owner
// that entered; it keeps every token that entered.
type shardsLedger struct {
	ledger
	shards map[string]*shardsHold
}

type shardsHold struct {
	open      bool
	member    string
	token     fencing.Token
	lastToken fencing.Token
	entered   []fencing.Token
}

// ServeHTTP applies one admitted write: /write/<group>/<id>?member=&phase=enter|exit.
func (l *shardsLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, name, ok := admitted(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	member := q.Get("member")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	h := l.shards[name]
	if h == nil {
		h = &shardsHold{}
		l.shards[name] = h
	}
	applyPhase(w, q, func() {
		if h.open {
			l.overlaps++
			l.violate("shard %s: %q entered with token %d while %q (token %d) owned it", name, member, tok, h.member, h.token)
		}
		if tok <= h.lastToken {
			l.violate("shard %s: %q entered with token %d, not above the previous owner's %d", name, member, tok, h.lastToken)
		}
		h.open, h.member, h.token = true, member, tok
		h.entered = append(h.entered, tok)
	}, func() {
		if !h.open || h.member != member || h.token != tok {
			l.violate("shard %s: %q exited with token %d, not the owner (open %v, %q, token %d)", name, member, tok, h.open, h.member, h.token)
		}
		h.open, h.lastToken = false, tok
	})
}

// shardsChildReport is the JSON line a member process prints at its end.
type shardsChildReport struct {
	Member string   `json:"member"`
	Owned  int      `json:"owned"`
	Errors []string `json:"errors,omitempty"`
}

// shardsProc is one member process.
type shardsProc struct {
	*harness.Child
	member string
	stdout bytes.Buffer
	done   chan struct{}
}

// shardsRun is one group's run: its member processes.
type shardsRun struct {
	cfg      ShardsConfig
	cli      *clientv3.Client
	endpoint string
	guardURL string
	group    string
	count    int
	members  []string
	procs    []*shardsProc
	failures *[]string
	res      *ShardsResult
	profile  func(member string) string // a member's CPU profile file, if set
}

func (r *shardsRun) start(ctx context.Context, i int) (*shardsProc, error) {
	args := []string{"-endpoint", r.endpoint, "-guard", r.guardURL, "-group", r.group, "-count", strconv.Itoa(r.count),
		"-member", r.members[i], "-ttl", r.cfg.TTL.String()}
	if r.profile != nil {
		args = append(args, "-cpuprofile", r.profile(r.members[i]))
	}
	p := &shardsProc{member: r.members[i], done: make(chan struct{}),
		Child: harness.NewChild(ctx, r.cfg.Binary, "shards", r.cfg.TTL+5*time.Second, args...)}
	p.Stdout = &p.stdout
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("shards: starting member %s: %w", r.members[i], err)
	}
	go func() { _ = p.Wait(); close(p.done) }()
	r.procs[i] = p
	return p, nil
}

// finished takes a member process's report once it exited.
func (r *shardsRun) finished(p *shardsProc) {
	r.res.ChildMaxRSS = max(r.res.ChildMaxRSS, p.MaxRSS())
	var rep shardsChildReport
	readReport(&p.stdout, &rep)
	r.res.ChildErrors += len(rep.Errors)
	if !p.ProcessState.Success() || len(rep.Errors) > 0 {
		*r.failures = append(*r.failures, fmt.Sprintf("member %s of %s: %v, errors %q: %s", p.member, r.group, p.ProcessState, rep.Errors, p.Stderr()))
	}
}

// balanced waits, up to cfg.Balance, until every shard is owned by one of
// the members, they are the group's live members, and each owns ⌊N/M⌋ or
// ⌈N/M⌉; it reads the group every 100 ms (shard.Inspect: one read at one
// revision). Observe would build a State of every shard at every revision,
// and with thousands of shards moving it falls behind the group.
func (r *shardsRun) balanced(ctx context.Context) (shard.State, error) {
	return r.balancedOver(ctx, r.members)
}

func (r *shardsRun) balancedOver(ctx context.Context, members []string) (shard.State, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Balance)
	defer cancel()
	var last shard.State
	for {
		st, err := shard.Inspect(ctx, r.cli, r.group, shard.WithNamespace(shardsNamespace))
		if err == nil {
			last = st
			if isBalanced(st, members) {
				return st, nil
			}
		}
		if err := retry.Sleep(ctx, 100*time.Millisecond); err != nil {
			return last, errors.New("the group did not balance in time")
		}
	}
}

func isBalanced(st shard.State, members []string) bool {
	if !slices.Equal(st.Members, members) {
		return false
	}
	owns := map[string]int{}
	for _, o := range st.Owners {
		if o.Member == "" {
			return false
		}
		owns[o.Member]++
	}
	n, m := len(st.Owners), len(members)
	for _, name := range members {
		if c := owns[name]; c != n/m && c != (n+m-1)/m {
			return false
		}
	}
	return true
}

// stop ends every member process (SIGTERM) and takes their reports.
func (r *shardsRun) stop() {
	for _, p := range r.procs {
		if p != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range r.procs {
		if p != nil {
			<-p.done
			r.finished(p)
		}
	}
}

// rest counts the member's requests over the window, per member process
// per second.
func (r *shardsRun) rest(ctx context.Context) (RestCost, error) {
	if err := retry.Sleep(ctx, r.cfg.Settle); err != nil {
		return RestCost{}, err
	}
	before, err := ReadServer(nil)
	if err != nil {
		return RestCost{}, err
	}
	t := time.Now()
	if err := retry.Sleep(ctx, r.cfg.Rest); err != nil {
		return RestCost{}, err
	}
	after, err := ReadServer(nil)
	if err != nil {
		return RestCost{}, err
	}
	d, secs := after.Sub(before), time.Since(t).Seconds()
	return RestCost{Unary: d.Unary, Stream: d.StreamMessages, Seconds: secs,
		PerMemberSecond: (d.Unary + d.StreamMessages) / float64(len(r.members)) / secs}, nil
}

// Shards runs the shards phase. A failed check is in ShardsResult.Failures
// (OK false); an error means the phase could not run.
func Shards(ctx context.Context, cfg ShardsConfig, progress io.Writer) (ShardsResult, error) {
	if err := cfg.Validate(); err != nil {
		return ShardsResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	res := ShardsResult{Members: cfg.Members, Shards: cfg.Shards, RestShards: cfg.RestShards, MovesBound: cfg.Shards * 22 / 10}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	srv, cli, stop, err := phaseMember()
	if err != nil {
		return res, err
	}
	defer stop()
	ledger := &shardsLedger{shards: map[string]*shardsHold{}}
	var rejected, writes int
	var rmu sync.Mutex
	fence, err := startFence(ledger, func(*http.Request) { rmu.Lock(); rejected++; rmu.Unlock() }, nil)
	if err != nil {
		return res, err
	}
	defer fence.close()
	var failures []string
	newRun := func(group string, count int) (*shardsRun, error) {
		r := &shardsRun{cfg: cfg, cli: cli, endpoint: srv.Endpoint(), guardURL: fence.url, group: group, count: count,
			procs: make([]*shardsProc, cfg.Members), failures: &failures, res: &res}
		for i := range cfg.Members {
			r.members = append(r.members, fmt.Sprintf("m%04d", i)) // sorted as Members sorts them
		}
		return r, nil
	}
	// Members join one at a time, each balanced before the next: 50
	// processes of a 4,096-shard group started at once on this 2-core
	// machine do not balance within a minute (docs/shards.md).
	startAll := func(r *shardsRun) (time.Duration, error) {
		t := time.Now()
		for i := range r.members {
			if _, err := r.start(ctx, i); err != nil {
				r.stop()
				return 0, err
			}
			if st, err := r.balancedOver(ctx, r.members[:i+1]); err != nil {
				r.stop()
				return 0, fmt.Errorf("%d shards over %d members did not balance within %v (%s): %w", r.count, i+1, cfg.Balance, balanceOf(st), err)
			}
		}
		return time.Since(t), nil
	}

	// The small group at rest.
	if cfg.RestShards > 0 {
		r, err := newRun("rest", cfg.RestShards)
		if err != nil {
			return res, err
		}
		if _, err := startAll(r); err != nil {
			return res, err
		}
		res.RestSmall, err = r.rest(ctx)
		r.stop()
		if err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "shards: %d shards over %d members at rest: %.3f requests/member/s (%.0f unary, %.0f stream messages in %.1f s)\n",
			cfg.RestShards, cfg.Members, res.RestSmall.PerMemberSecond, res.RestSmall.Unary, res.RestSmall.Stream, res.RestSmall.Seconds)
	}

	// The large group: join, rest, the rolling restart.
	r, err := newRun("ingest", cfg.Shards)
	if err != nil {
		return res, err
	}
	prefix := shard.GroupPrefix(shardsNamespace, "ingest")
	rev0, err := currentRevision(ctx, cli)
	if err != nil {
		return res, err
	}
	took, err := startAll(r)
	if err != nil {
		return res, err
	}
	res.StartSeconds = took.Seconds()
	fmt.Fprintf(progress, "shards: %d shards over %d members balanced in %.1f s\n", cfg.Shards, cfg.Members, res.StartSeconds)
	if res.RestLarge, err = r.rest(ctx); err != nil {
		r.stop()
		return res, err
	}
	if res.RestSmall.PerMemberSecond > 0 {
		res.RestRatio = res.RestLarge.PerMemberSecond / res.RestSmall.PerMemberSecond
	}
	fmt.Fprintf(progress, "shards: %d shards at rest: %.3f requests/member/s (%.0f unary, %.0f stream messages in %.1f s), %.2f× the %d-shard group's\n",
		cfg.Shards, res.RestLarge.PerMemberSecond, res.RestLarge.Unary, res.RestLarge.Stream, res.RestLarge.Seconds, res.RestRatio, cfg.RestShards)
	startRev, err := currentRevision(ctx, cli)
	if err != nil {
		r.stop()
		return res, err
	}
	bounds := []int64{startRev} // the revision each restart ended at
	var restarts []time.Duration
	rolling := time.Now()
	for i := range r.members {
		t := time.Now()
		old := r.procs[i]
		_ = old.Process.Signal(syscall.SIGTERM)
		select {
		case <-old.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		r.finished(old)
		if _, err := r.start(ctx, i); err != nil {
			r.procs[i] = nil
			failures = append(failures, err.Error())
			break
		}
		if st, err := r.balanced(ctx); err != nil {
			failures = append(failures, fmt.Sprintf("restart of %s: %v (%s)", r.members[i], err, balanceOf(st)))
			break
		}
		restarts = append(restarts, time.Since(t))
		rev, err := currentRevision(ctx, cli)
		if err != nil {
			failures = append(failures, err.Error())
			break
		}
		bounds = append(bounds, rev)
	}
	res.RestartSeconds = time.Since(rolling).Seconds()
	res.Restarts = len(restarts)
	if len(restarts) > 0 {
		res.RestartP50, res.RestartP99 = harness.Percentile(restarts, 50).Seconds(), harness.Percentile(restarts, 99).Seconds()
		res.RestartMax = slices.Max(restarts).Seconds()
	}
	if res.Restarts < cfg.Members {
		failures = append(failures, fmt.Sprintf("%d of %d restarts done", res.Restarts, cfg.Members))
	}
	fmt.Fprintf(progress, "shards: rolling restart of %d members in %.1f s (each to balanced: p50 %.2f s, p99 %.2f s)\n",
		res.Restarts, res.RestartSeconds, res.RestartP50, res.RestartP99)
	r.stop()

	// The history, from before the first join to after every member's
	// exit: moves are counted to the last restart's balance, owners to the
	// end, so that every enter the ledger saw, an interrupted restart's
	// too, is judged against it.
	h, err := replayShards(context.Background(), cli, prefix, cfg.Shards, rev0, bounds)
	if err != nil {
		return res, fmt.Errorf("shards: reading etcd's history: %w", err)
	}
	res.HistoryEvents, res.Moves = h.events, h.moves
	for _, m := range h.perRestart {
		res.MaxMovesPerRestart = max(res.MaxMovesPerRestart, m)
	}
	res.DoubleHistory = h.regressions
	failures = append(failures, h.violations...)
	ledger.mu.Lock()
	writes = ledger.writes
	res.DoubleFenced = ledger.overlaps
	for name, sh := range ledger.shards {
		if sh.open {
			failures = append(failures, fmt.Sprintf("shard %s: %q never wrote its exit (token %d)", name, sh.member, sh.token))
		}
	}
	unowned := h.notOwners(ledger, "ingest")
	res.DoubleHistory += len(unowned)
	failures = append(failures, stormFirst(unowned, 10)...)
	failures = append(failures, ledger.violations...)
	ledger.mu.Unlock()
	rmu.Lock()
	res.Rejected = rejected
	rmu.Unlock()
	res.FencedWrites = writes
	res.DoubleFenced += res.Rejected
	if res.Rejected > 0 {
		failures = append(failures, fmt.Sprintf("the guard rejected %d writes as stale", res.Rejected))
	}
	if res.Moves > res.MovesBound {
		failures = append(failures, fmt.Sprintf("%d moves in the rolling restart, above 2.2 × N = %d", res.Moves, res.MovesBound))
	}
	if res.KeysLeft, err = countKeysLeft(cli, shardsNamespace, &failures); err != nil {
		return res, fmt.Errorf("shards: %w", err)
	}
	res.Failures = stormFirst(failures, 20)
	res.OK = len(res.Failures) == 0
	fmt.Fprintf(progress, "shards: %d moves in the rolling restart (bound %d, at most %d for one restart) from %d history events; double ownership %d from the history, %d from %d fenced writes (%d rejected); child max RSS %d MiB\n",
		res.Moves, res.MovesBound, res.MaxMovesPerRestart, res.HistoryEvents, res.DoubleHistory, res.DoubleFenced, res.FencedWrites, res.Rejected, res.ChildMaxRSS>>20)
	return res, nil
}

// balanceOf says how far st is from balanced: its members, the unowned
// shards, the fewest and most one member owns.
func balanceOf(st shard.State) string {
	owns := map[string]int{}
	unowned := 0
	for _, o := range st.Owners {
		if o.Member == "" {
			unowned++
		} else {
			owns[o.Member]++
		}
	}
	lo, hi := len(st.Owners), 0
	for _, m := range st.Members {
		lo, hi = min(lo, owns[m]), max(hi, owns[m])
	}
	return fmt.Sprintf("last seen at rev %d: %d live members, %d unowned, %d to %d shards each", st.Revision, len(st.Members), unowned, lo, hi)
}

func currentRevision(ctx context.Context, cli *clientv3.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/"+shardsNamespace+"/revision")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// shardsHistory is a group's history replayed.
type shardsHistory struct {
	events      int
	moves       int   // owner changes between members after bounds[0]
	perRestart  []int // moves between consecutive bounds
	regressions int   // an owner whose token was not above every earlier owner's
	owners      []map[fencing.Token]bool
	violations  []string
}

// replayShards reads the group's keys' history from rev0+1 to now with a
// watch, and replays each shard's queue: its owner at each revision is its
// oldest key (as shard.Inspect reads it), valued the member's name. Moves
// are counted between the first and the last of bounds (per bound in
// perRestart); every owner to now is kept, for notOwners: called once
// every member exited, so that a run cut short between two bounds still
// judges every enter it made. Now is a marker key put and deleted here
// (no shard's), whose event ends the watch.
func replayShards(ctx context.Context, cli *clientv3.Client, prefix string, count int, rev0 int64, bounds []int64) (shardsHistory, error) {
	h := shardsHistory{perRestart: make([]int, len(bounds)-1), owners: make([]map[fencing.Token]bool, count)}
	type key struct {
		rev    int64
		member string
	}
	queues := make([]map[string]key, count)
	owner := make([]fencing.Token, count)
	last := make([]string, count)
	top := make([]fencing.Token, count)
	for i := range queues {
		queues[i], h.owners[i] = map[string]key{}, map[fencing.Token]bool{}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // a loaded machine replays a cold start's 100,000s of revisions slowly
	defer cancel()
	sprefix := prefix + "s/"
	marker := sprefix + "~end"
	mr, err := cli.Put(ctx, marker, "")
	if err != nil {
		return h, err
	}
	end := mr.Header.Revision
	defer func() { _, _ = cli.Delete(context.Background(), marker) }()
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), sprefix, clientv3.WithPrefix(), clientv3.WithRev(rev0+1))
	touched := map[int]bool{}
	settle := func(rev int64) {
		for id := range touched {
			var best key
			var bestKey string
			for k, v := range queues[id] {
				if bestKey == "" || v.rev < best.rev {
					best, bestKey = v, k
				}
			}
			t := fencing.Token(best.rev)
			if bestKey == "" || t == owner[id] {
				owner[id] = t
				continue
			}
			owner[id] = t
			if t <= top[id] {
				h.regressions++
				if len(h.violations) < 20 {
					h.violations = append(h.violations, fmt.Sprintf("shard %d: owner at revision %d has token %d, not above the earlier owners' %d", id, rev, t, top[id]))
				}
			}
			top[id] = max(top[id], t)
			h.owners[id][t] = true
			if last[id] != "" && last[id] != best.member && rev > bounds[0] && rev <= bounds[len(bounds)-1] {
				h.moves++
				if i, _ := slices.BinarySearch(bounds, rev); i > 0 && i <= len(h.perRestart) {
					h.perRestart[i-1]++
				}
			}
			last[id] = best.member
		}
		clear(touched)
	}
	var cur int64
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return h, err
		}
		for _, ev := range wr.Events {
			rev := ev.Kv.ModRevision
			if rev >= end { // the marker
				settle(cur)
				return h, nil
			}
			if rev != cur {
				settle(cur)
				cur = rev
			}
			h.events++
			rest := strings.TrimPrefix(string(ev.Kv.Key), sprefix)
			idText, _, _ := strings.Cut(rest, "/")
			id, err := strconv.Atoi(idText)
			if err != nil || id < 0 || id >= count {
				continue
			}
			touched[id] = true
			if ev.Type == clientv3.EventTypeDelete {
				delete(queues[id], string(ev.Kv.Key))
			} else {
				queues[id][string(ev.Kv.Key)] = key{rev: ev.Kv.CreateRevision, member: string(ev.Kv.Value)}
			}
		}
	}
	return h, fmt.Errorf("the watch ended before revision %d: %w", end, ctx.Err())
}

// notOwners are the ledger's enters to group's shards by a token etcd's
// history never shows owning the shard: a member whose fn ran while its
// key was not the shard's oldest. Called with the ledger's mu held.
func (h shardsHistory) notOwners(l *shardsLedger, group string) []string {
	var out []string
	for name, sh := range l.shards {
		g, idText, _ := strings.Cut(name, "/")
		id, err := strconv.Atoi(idText)
		if g != group || err != nil || id < 0 || id >= len(h.owners) {
			continue
		}
		for _, t := range sh.entered {
			if !h.owners[id][t] {
				out = append(out, fmt.Sprintf("shard %d: an enter with token %d, which etcd's history never shows owning it", id, t))
			}
		}
	}
	slices.Sort(out)
	return out
}

// shardsChildMain is "child shards": a member of the group until SIGTERM.
func shardsChildMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("child shards", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL")
	guardURL := fs.String("guard", "", "the parent's guard URL")
	group := fs.String("group", "", "the shard group")
	count := fs.Int("count", 0, "the group's shard count")
	member := fs.String("member", "", "this member's name")
	ttl := fs.Duration("ttl", 10*time.Second, "the session's lease TTL")
	profile := fs.String("cpuprofile", "", "write this member's CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "child shards: -cpuprofile: %v\n", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if *endpoint == "" || *guardURL == "" || *group == "" || *member == "" || *count < 1 {
		fmt.Fprintln(stderr, "child shards: -endpoint, -guard, -group, -member and -count are required")
		return 2
	}
	rep := shardsChildReport{Member: *member}
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if len(rep.Errors) < 10 {
			rep.Errors = append(rep.Errors, err.Error())
		}
		mu.Unlock()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintf(stderr, "child shards %s: %v\n", *member, err)
		return 1
	}
	defer cli.Close()
	g, err := shard.New(cli, *group, *count, shard.WithNamespace(shardsNamespace), shard.WithTTL(*ttl))
	if err != nil {
		fmt.Fprintf(stderr, "child shards %s: %v\n", *member, err)
		return 1
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8, MaxConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	err = g.Run(ctx, *member, func(sctx context.Context, s *shard.Shard) error {
		mu.Lock()
		rep.Owned++
		mu.Unlock()
		base := fmt.Sprintf("%s/write/%s/%d?member=%s", *guardURL, *group, s.ID(), url.QueryEscape(*member))
		// Both writes are made whatever sctx says: the shard stays this
		// member's until fn returns, and the ledger judges them.
		if err := procPost(context.Background(), hc, base+"&phase=enter", s.Token(), 10*time.Second); err != nil {
			fail(fmt.Errorf("shard %d: enter: %w", s.ID(), err))
		}
		<-sctx.Done()
		if err := procPost(context.Background(), hc, base+"&phase=exit", s.Token(), 10*time.Second); err != nil {
			fail(fmt.Errorf("shard %d: exit: %w (%v)", s.ID(), err, context.Cause(sctx)))
		}
		return nil
	})
	_ = g.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		fail(fmt.Errorf("run: %w", err))
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}
