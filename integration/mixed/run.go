package mixed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/integration/robustness"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/shard"
)

// The fault kinds of a run.
const (
	FaultKill    = "process-kill"                // SIGKILL of a worker process, replaced by a new one
	FaultCLIKill = "cli-kill"                    // SIGKILL of a running `baton lock`
	FaultFreeze  = robustness.FaultFreeze        // a holding worker stopped past its TTL, then resumed
	FaultCut     = robustness.FaultBlackhole     // a worker's traffic blackholed past its TTL
	FaultIsolate = robustness.FaultMemberIsolate // a member (the leader half the time) cut from its peers
)

// FaultKinds are every kind a run injects by default.
func FaultKinds() []string {
	return []string{FaultKill, FaultCLIKill, FaultFreeze, FaultCut, FaultIsolate}
}

// DefaultProcs are the worker processes each build runs, by their lanes.
var DefaultProcs = []string{"mutex,set", "semaphore,rwmutex,delay", "election,preferred,shard"}

// Config is one run.
type Config struct {
	Cluster  *cluster.Cluster
	Old, New Build
	// Duration of the traffic (default 60 s); TTL of every lease (3 s).
	Duration, TTL time.Duration
	Seed          uint64
	Namespace     string // default "mixed"
	// Procs are each build's worker processes (default DefaultProcs);
	// NewProcs more of the new build's alone.
	Procs, NewProcs []string
	// CLI runs each build's `baton lock` in a loop, one name and two.
	CLI bool
	// Faults are the kinds injected (default FaultKinds; none: empty, not
	// nil).
	Faults []string
	// Cover lists the lanes every build must acquire in (coverage);
	// FaultBuild, when set, is the only build whose processes the faults
	// hit (a member is cut off all the same).
	Cover      []string
	FaultBuild string
	Log        io.Writer
	// FreeBound is the free-lock check's (default robustness's).
	FreeBound time.Duration
	// HistoryFile, when set, receives the whole history as JSON.
	HistoryFile string
}

// Result is a run's report and its figures.
type Result struct {
	Report *robustness.Report
	// Acquisitions by build and lane; Handovers of exclusive names from a
	// holder of one build to one of the other ("old→new").
	Acquisitions map[string]map[string]int
	Handovers    map[string]int
	// Faults by kind and build (the kind alone for a member's).
	Faults   map[string]int
	Coverage []string // lanes of a build that acquired nothing
	Leftover string   // contender keys left after every process ended
	Errors   []string // stderr of processes that failed
}

// Violations are every violation the checks and the coverage found.
func (r *Result) Violations() int {
	n := len(r.Report.Violations) + len(r.Coverage)
	if r.Leftover != "" {
		n++
	}
	return n
}

type runner struct {
	cfg   Config
	rec   *record
	admin *clientv3.Client
	log   io.Writer

	mu      sync.Mutex
	nextID  int
	workers []*proc
	cli     map[string]*proc // the running `baton lock` of each build
}

// Run drives both builds' traffic and the faults for cfg.Duration, stops
// everything, and judges etcd's history and the processes' reports.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 60 * time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "mixed"
	}
	if cfg.Procs == nil {
		cfg.Procs = DefaultProcs
	}
	if cfg.Faults == nil {
		cfg.Faults = FaultKinds()
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	eps := cfg.Cluster.Endpoints()
	admin, err := newClient(eps)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	watchCli, err := newClient(eps)
	if err != nil {
		return nil, err
	}
	defer watchCli.Close()
	names, err := describeNames(admin, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, rec: &record{}, admin: admin, log: cfg.Log, cli: map[string]*proc{}}
	h := &robustness.History{Start: robustness.Now(), Names: names}
	// This process's stalls and the round trips of a read through the
	// cluster: the free-lock bound follows them on a loaded machine.
	loadBefore := harness.Loadavg()
	meter := harness.StartMeter(robustness.Now)
	defer meter.Stop()
	events := robustness.StartEventLog(watchCli, h)
	healthCtx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		robustness.WatchHealth(healthCtx, robustness.Embedded{C: cfg.Cluster}, func(d robustness.Disturbance) {
			r.rec.mu.Lock()
			r.rec.disturb = append(r.rec.disturb, d)
			r.rec.mu.Unlock()
		})
	}()
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		robustness.WatchRoundTrips(healthCtx, admin, func(p robustness.Probe) {
			r.rec.mu.Lock()
			r.rec.probes = append(r.rec.probes, p)
			r.rec.mu.Unlock()
		})
	}()
	fmt.Fprintf(r.log, "mixed: seed %d, %v of traffic; old %s, new %s; faults %v\n", cfg.Seed, cfg.Duration, cfg.Old.Commit, cfg.New.Commit, cfg.Faults)

	traffic, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	for _, b := range []Build{cfg.Old, cfg.New} {
		specs := cfg.Procs
		if b.Label == cfg.New.Label {
			specs = append(slices.Clone(specs), cfg.NewProcs...)
		}
		for _, lanes := range specs {
			if err := r.startWorker(b, lanes); err != nil {
				stopTraffic()
				r.stopAll()
				stopHealth()
				<-healthDone
				<-probesDone
				_ = events.Finish(ctx, h)
				return nil, err
			}
		}
	}
	var cliWG sync.WaitGroup
	if cfg.CLI {
		for _, b := range []Build{cfg.Old, cfg.New} {
			cliWG.Add(1)
			go func() { defer cliWG.Done(); r.cliLoop(traffic, b) }()
		}
	}
	deadline := time.Now().Add(cfg.Duration)
	r.faultLoop(traffic, deadline)
	pauseUntil(traffic, deadline)
	stopTraffic()
	fmt.Fprintf(r.log, "mixed: traffic stopped after %v, stopping the processes\n", time.Duration(robustness.Now()-h.Start).Round(time.Second))
	cliWG.Wait()
	r.stopAll()
	stopHealth()
	<-healthDone
	<-probesDone
	h.Settled = robustness.Now()
	meter.Stop()
	h.Stalls = meter.Stalls()
	leftover := r.waitNoKeys(ctx, names)
	ferr := events.Finish(ctx, h)

	r.rec.mu.Lock()
	h.Ops, h.Holds, h.Regs, h.Faults, h.Disturbances, h.Probes = r.rec.ops, r.rec.holds, r.rec.regs, r.rec.faults, r.rec.disturb, r.rec.probes
	for _, f := range r.rec.freezes {
		f.proc.mu.Lock()
		for _, x := range f.proc.holds {
			// Frozen: acquired before the process ran again (a hold it
			// reported once resumed may have been taken before it
			// stopped), and not known to have ended before it stopped.
			if x.Acquired <= f.end+int64(200*time.Millisecond) && (x.Ended == 0 || x.Ended >= f.start) {
				x.Frozen = true
			}
		}
		f.proc.mu.Unlock()
	}
	r.rec.mu.Unlock()
	rep := robustness.Check(h, robustness.Config{TTL: cfg.TTL, FreeBound: cfg.FreeBound})
	rep.Seed = cfg.Seed
	rep.Starvation, rep.LoadBefore, rep.LoadAfter = meter.Starvation(), loadBefore, harness.Loadavg()
	if ferr != nil {
		rep.Violations = append(rep.Violations, robustness.Violation{Check: "event-log", Msg: ferr.Error()})
	}
	res := &Result{Report: rep, Leftover: leftover}
	r.figures(h, res)
	if cfg.HistoryFile != "" {
		if b, err := json.Marshal(h); err != nil {
			fmt.Fprintf(r.log, "mixed: history not saved: %v\n", err)
		} else if err := os.WriteFile(cfg.HistoryFile, b, 0o644); err != nil {
			fmt.Fprintf(r.log, "mixed: history not saved: %v\n", err)
		}
	}
	return res, nil
}

func newClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// The worker's names and where its holders write (package worker).
const (
	workPrefix = "/work/"
	semLimit   = 2
	lockDelay  = 2 * time.Second
	shardGroup = "g0"
	shardCount = 4
)

// describeNames is every name both builds contend on, with its rule.
func describeNames(cli *clientv3.Client, ns string) ([]robustness.NameInfo, error) {
	var out []robustness.NameInfo
	add := func(prim, name, prefix string, limit int) *robustness.NameInfo {
		out = append(out, robustness.NameInfo{Prim: prim, Name: name, Prefix: prefix, Limit: limit, Work: workPrefix + prim + "/" + name})
		return &out[len(out)-1]
	}
	for _, name := range []string{"m0", "m1", "m2", "ld0"} {
		m, err := mutex.New(cli, name, mutex.WithNamespace(ns))
		if err != nil {
			return nil, err
		}
		n := add("mutex", name, m.Prefix(), 1)
		_ = m.Close()
		if name == "ld0" {
			n.Delay, n.DelayPrefix = lockDelay, delay.Prefix(ns, keys.Lock, name)
		}
	}
	for _, name := range []string{"e0", "e1"} {
		e, err := election.New(cli, name, election.WithNamespace(ns))
		if err != nil {
			return nil, err
		}
		add("election", name, e.Prefix(), 1).Preferred = name == "e1"
		_ = e.Close()
	}
	s, err := semaphore.New(cli, "s0", semLimit, semaphore.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	add("semaphore", "s0", s.Prefix(), semLimit)
	_ = s.Close()
	rw, err := rwmutex.New(cli, "rw0", rwmutex.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	add("rwmutex", "rw0", rw.Prefix(), 1)
	_ = rw.Close()
	for id := 0; id < shardCount; id++ {
		add("shard", fmt.Sprintf("%s/%05d", shardGroup, id), fmt.Sprintf("%ss/%05d/", shard.GroupPrefix(ns, shardGroup), id), 1)
	}
	g, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Fence = g.Key(out[i].Prim + "/" + out[i].Name)
	}
	return out, nil
}

func (r *runner) id() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

func (r *runner) startWorker(b Build, lanes string) error {
	id := r.id()
	p, err := startWorker(b, id, lanes, r.cfg.Cluster, r.cfg.Namespace, r.cfg.TTL, r.cfg.Seed+uint64(id), r.rec)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.workers = append(r.workers, p)
	r.mu.Unlock()
	return nil
}

// stopAll stops every worker, letting it release what it holds.
func (r *runner) stopAll() {
	r.mu.Lock()
	ws := r.workers
	r.workers = nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(20 * time.Second) }()
	}
	wg.Wait()
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	for _, p := range ws {
		if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() && !p.killed() {
			r.rec.ops = append(r.rec.ops, robustness.Op{Client: fmt.Sprintf("%s.p%d", p.b.Label, p.id), Kind: "worker.Exit",
				Call: robustness.Now(), Return: robustness.Now(), Err: p.cmd.ProcessState.String() + ": " + p.stderr.String()})
		}
	}
}

// killed: the process ended by a signal (a fault's, or stop's after the
// wait).
func (p *proc) killed() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// cliLoop runs the build's `baton lock m0 -- worker -cli` and `baton lock
// m1 m2 -- worker -cli` in turn until ctx ends.
func (r *runner) cliLoop(ctx context.Context, b Build) {
	eps := strings.Join(r.cfg.Cluster.Endpoints(), ",")
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(len(b.Label))))
	for i := 0; ctx.Err() == nil; i++ {
		names, kind := []string{"m0"}, "baton.lock"
		if i%2 == 1 {
			names, kind = []string{"m1", "m2"}, "baton.lock.set"
		}
		id := r.id()
		p := newProc(b, id, "", r.rec)
		args := append([]string{"lock", "--endpoints", eps, "--namespace", r.cfg.Namespace, "--ttl", r.cfg.TTL.String(), "--timeout", "5s"}, names...)
		args = append(args, "--", b.Worker, "-cli", "-build", b.Label, "-id", strconv.Itoa(id), "-endpoints", eps,
			"-namespace", r.cfg.Namespace, "-seed", strconv.FormatUint(r.cfg.Seed+uint64(id), 10), "-max", "1m")
		p.cmd = exec.Command(b.Baton, args...)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		p.cmd.Stderr = &p.stderr
		out, err := p.cmd.StdoutPipe()
		start := robustness.Now()
		if err == nil {
			err = p.cmd.Start()
		}
		if err != nil {
			r.rec.mu.Lock()
			r.rec.ops = append(r.rec.ops, robustness.Op{Client: fmt.Sprintf("%s.cli%d", b.Label, id), Kind: kind, Name: strings.Join(names, "+"), Call: start, Return: robustness.Now(), Err: err.Error()})
			r.rec.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.cli[b.Label] = p
		r.mu.Unlock()
		p.read(out)
		err = p.cmd.Wait()
		close(p.done)
		r.mu.Lock()
		delete(r.cli, b.Label)
		r.mu.Unlock()
		msg := ""
		if err != nil {
			msg = err.Error() + ": " + strings.TrimSpace(p.stderr.String())
		}
		r.rec.mu.Lock()
		r.rec.ops = append(r.rec.ops, robustness.Op{Client: fmt.Sprintf("%s.cli%d", b.Label, id), Kind: kind, Name: strings.Join(names, "+"), Call: start, Return: robustness.Now(), Err: msg})
		r.rec.mu.Unlock()
		pause(ctx, time.Duration(rng.IntN(200))*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func pauseUntil(ctx context.Context, t time.Time) { pause(ctx, time.Until(t)) }

// faultLoop injects one fault at a time, each healed before the next,
// dealt from a shuffled deck that holds every kind once for each build (a
// member's once), in phases of 18 s followed by 7 to 10 s of quiet, in
// which the checks that judge only with no fault near (a free lock is
// taken) judge; it ends 5 s before deadline.
func (r *runner) faultLoop(ctx context.Context, deadline time.Time) {
	if len(r.cfg.Faults) == 0 {
		return
	}
	builds := []string{r.cfg.Old.Label, r.cfg.New.Label}
	if r.cfg.FaultBuild != "" {
		builds = []string{r.cfg.FaultBuild}
	}
	type card struct{ kind, build string }
	var cards []card
	for _, k := range r.cfg.Faults {
		if k == FaultIsolate {
			cards = append(cards, card{k, ""})
			continue
		}
		for _, b := range builds {
			cards = append(cards, card{k, b})
		}
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xfa))
	pause(ctx, 3*time.Second) // every process running and holding
	var deck []card
	phaseEnd := time.Now().Add(18 * time.Second)
	for ctx.Err() == nil && time.Until(deadline) > 5*time.Second {
		if time.Now().After(phaseEnd) {
			pause(ctx, time.Duration(7000+rng.IntN(3000))*time.Millisecond)
			phaseEnd = time.Now().Add(18 * time.Second)
			continue
		}
		if len(deck) == 0 {
			deck = slices.Clone(cards)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		c := deck[0]
		deck = deck[1:]
		r.inject(ctx, rng, c.kind, c.build)
		pause(ctx, time.Duration(300+rng.IntN(1000))*time.Millisecond)
	}
}

// pick returns a running worker of build, one that holds now if holding
// (waiting up to 3 s for one).
func (r *runner) pick(ctx context.Context, rng *rand.Rand, build string, holding bool) *proc {
	for range 30 {
		r.mu.Lock()
		var ps []*proc
		for _, p := range r.workers {
			if p.alive() && (!holding || p.holding()) && p.b.Label == build {
				ps = append(ps, p)
			}
		}
		r.mu.Unlock()
		if len(ps) > 0 {
			return ps[rng.IntN(len(ps))]
		}
		if !holding {
			return nil
		}
		pause(ctx, 100*time.Millisecond)
	}
	return nil
}

// inject makes one fault of kind to a process of build and heals it.
func (r *runner) inject(ctx context.Context, rng *rand.Rand, kind, build string) {
	f := robustness.Fault{Kind: kind, Start: robustness.Now()}
	switch kind {
	case FaultKill:
		p := r.pick(ctx, rng, build, rng.IntN(2) == 0)
		if p == nil {
			return
		}
		f.Start = robustness.Now()
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		f.End, f.Detail = robustness.Now(), p.String()
		r.mu.Lock()
		r.workers = slices.DeleteFunc(r.workers, func(x *proc) bool { return x == p })
		r.mu.Unlock()
		p.part.Close()
		pause(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond)
		if ctx.Err() == nil {
			if err := r.startWorker(p.b, p.lanes); err != nil {
				f.Detail += " (not replaced: " + err.Error() + ")"
			}
		}
	case FaultCLIKill:
		var p *proc
		for range 30 {
			r.mu.Lock()
			p = r.cli[build]
			r.mu.Unlock()
			if p != nil {
				break
			}
			pause(ctx, 100*time.Millisecond)
		}
		if p == nil {
			return
		}
		f.Start = robustness.Now()
		_ = p.signal(syscall.SIGKILL)
		f.End, f.Detail = robustness.Now(), p.String()+": baton lock killed"
	case FaultFreeze:
		p := r.pick(ctx, rng, build, true)
		if p == nil {
			return
		}
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		f.Start = robustness.Now()
		stopped, how := r.freeze(p)
		if stopped == 0 {
			return // it exited
		}
		time.Sleep(r.cfg.TTL + 1500*time.Millisecond) // past the TTL, whatever ctx says
		p.mu.Lock()
		p.stopped = false
		_ = p.signal(syscall.SIGCONT)
		p.mu.Unlock()
		f.End, f.Detail = robustness.Now(), p.String()+how
		r.rec.mu.Lock()
		// Its holds are judged frozen from when it stopped: until then it
		// ran, and could be told.
		r.rec.freezes = append(r.rec.freezes, freeze{proc: p, start: stopped, end: f.End})
		r.rec.mu.Unlock()
	case FaultCut:
		p := r.pick(ctx, rng, build, rng.IntN(2) == 0)
		if p == nil {
			return
		}
		f.Start = robustness.Now()
		p.part.Blackhole()
		time.Sleep(r.cfg.TTL + time.Second)
		p.part.Restore()
		f.End, f.Detail = robustness.Now(), p.String()
	case FaultIsolate:
		ms := r.cfg.Cluster.Members()
		m := ms[rng.IntN(len(ms))]
		if rng.IntN(2) == 0 {
			if l, err := r.cfg.Cluster.Leader(); err == nil {
				m = l
			}
		}
		f.Start = robustness.Now()
		m.CutPeers()
		time.Sleep(time.Duration(3000+rng.IntN(2000)) * time.Millisecond)
		m.MendPeers()
		f.End, f.Detail = robustness.Now(), m.Name()+" cut from its peers"
	default:
		return
	}
	fmt.Fprintf(r.log, "mixed: fault %s %s\n", kind, f.Detail)
	r.rec.fault(f)
}

// freeze stops p: it asks the worker to stop itself at its next freeze
// point, in a hold just before a write (which then comes after the TTL,
// whatever the scheduling), and stops it from outside, wherever it is,
// when it reaches none in time. It returns when p stopped (0 when it
// exited instead), and says how.
func (r *runner) freeze(p *proc) (stopped int64, how string) {
	p.mu.Lock()
	p.asking = true
	select {
	case <-p.froze: // a report that came too late for an earlier freeze
	default:
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.asking = false
		p.mu.Unlock()
	}()
	_ = p.signal(syscall.SIGUSR1)
	t := time.NewTimer(freezeWait)
	defer t.Stop()
	select {
	case at := <-p.froze:
		return at, " (before a write)"
	case <-p.done:
		return 0, ""
	case <-t.C:
	}
	p.mu.Lock()
	p.asking = false
	p.mu.Unlock()
	select {
	case at := <-p.froze: // it reported as the wait ended
		return at, " (before a write)"
	default:
	}
	// A report after this comes too late: its reader resumes it.
	stopped = robustness.Now()
	_ = p.signal(syscall.SIGSTOP)
	return stopped, " (wherever it was)"
}

// freezeWait is how long freeze waits for a freeze point: longer than a
// worker honours a request (its freezeAskedFor, 2 s).
const freezeWait = 2500 * time.Millisecond

// waitNoKeys waits, up to twice the TTL and more, for every contender key
// to go (a killed process's lease expires by itself), and describes what
// is left.
func (r *runner) waitNoKeys(ctx context.Context, names []robustness.NameInfo) string {
	deadline := time.Now().Add(2*r.cfg.TTL + 10*time.Second)
	for {
		var left []string
		for _, n := range names {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := r.admin.Get(gctx, n.Prefix, clientv3.WithPrefix())
			cancel()
			if err != nil {
				left = append(left, fmt.Sprintf("%s: %v", n.Prefix, err))
				continue
			}
			for _, kv := range resp.Kvs {
				left = append(left, fmt.Sprintf("%s (lease %x, token %d)", kv.Key, kv.Lease, kv.CreateRevision))
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Sprintf("%d keys left after every process ended: %v", len(left), left)
		}
		pause(ctx, 250*time.Millisecond)
	}
}

// laneOf is the build and lane of a client name ("old.p3.mutex0.g1",
// "new.cli12").
func laneOf(client string) (build, lane string) {
	parts := strings.Split(client, ".")
	if len(parts) < 2 {
		return client, ""
	}
	if strings.HasPrefix(parts[1], "cli") {
		return parts[0], "cli"
	}
	if len(parts) < 3 {
		return parts[0], ""
	}
	return parts[0], strings.TrimRight(parts[2], "0123456789")
}

// figures counts acquisitions by build and lane, hand-overs between the
// builds, faults, and the lanes that acquired nothing.
func (r *runner) figures(h *robustness.History, res *Result) {
	res.Acquisitions = map[string]map[string]int{}
	res.Handovers = map[string]int{}
	res.Faults = map[string]int{}
	count := func(build, lane string) {
		if res.Acquisitions[build] == nil {
			res.Acquisitions[build] = map[string]int{}
		}
		res.Acquisitions[build][lane]++
	}
	for _, o := range h.Ops {
		if o.Err != "" {
			if o.Kind == "worker.Exit" {
				res.Errors = append(res.Errors, o.Client+": "+o.Err)
			}
			continue
		}
		build, lane := laneOf(o.Client)
		switch o.Kind {
		case "mutex.Lock", "mutex.TryLock", "mutex.Set.Lock", "semaphore.Acquire", "election.Campaign", "shard.Own":
			count(build, lane)
		case "rwmutex.RLock":
			count(build, "rwmutex.read")
		case "rwmutex.Lock":
			count(build, "rwmutex.write")
		case "baton.lock":
			count(build, "cli")
		case "baton.lock.set":
			count(build, "cli.set")
		case "election.Transfer":
			count(build, lane+".transfer")
		}
	}
	for _, f := range h.Faults {
		build, _, _ := strings.Cut(f.Detail, " ")
		if f.Kind == FaultIsolate {
			build = "cluster"
		}
		res.Faults[f.Kind+" "+build]++
	}
	for _, b := range []string{r.cfg.Old.Label, r.cfg.New.Label} {
		for _, lane := range r.cfg.Cover {
			if res.Acquisitions[b][lane] == 0 {
				res.Coverage = append(res.Coverage, b+" "+lane)
			}
		}
	}
	// Hand-overs: consecutive holders (by token) of an exclusive name.
	byName := map[string][]*robustness.Hold{}
	for _, x := range h.Holds {
		if x.Prim == "semaphore" || x.Prim == "rwmutex" {
			continue
		}
		byName[x.Prim+"/"+x.Name] = append(byName[x.Prim+"/"+x.Name], x)
	}
	for _, xs := range byName {
		sort.Slice(xs, func(i, j int) bool { return xs[i].Token < xs[j].Token })
		for i := 1; i < len(xs); i++ {
			a, _ := laneOf(xs[i-1].Client)
			b, _ := laneOf(xs[i].Client)
			if xs[i].Token != xs[i-1].Token {
				res.Handovers[a+"→"+b]++
			}
		}
	}
}

// Print writes the figures, then the checks' report (its last line is the
// report's summary).
func (res *Result) Print(w io.Writer, cfg Config) {
	fmt.Fprintf(w, "mixed versions: old %s, new %s\n", cfg.Old.Commit, cfg.New.Commit)
	fmt.Fprintf(w, "acquisitions by build and lane:\n")
	var lanes []string
	seen := map[string]bool{}
	for _, m := range res.Acquisitions {
		for l := range m {
			if !seen[l] {
				seen[l] = true
				lanes = append(lanes, l)
			}
		}
	}
	sort.Strings(lanes)
	for _, l := range lanes {
		fmt.Fprintf(w, "  %-22s old %6d   new %6d\n", l, res.Acquisitions[cfg.Old.Label][l], res.Acquisitions[cfg.New.Label][l])
	}
	fmt.Fprintf(w, "hand-overs of exclusive names: old→new %d, new→old %d, old→old %d, new→new %d\n",
		res.Handovers["old→new"], res.Handovers["new→old"], res.Handovers["old→old"], res.Handovers["new→new"])
	fmt.Fprintf(w, "faults:")
	for _, k := range sortedKeys(res.Faults) {
		fmt.Fprintf(w, " %s %d;", k, res.Faults[k])
	}
	fmt.Fprintln(w)
	for _, e := range res.Errors {
		fmt.Fprintf(w, "process error: %s\n", e)
	}
	for _, c := range res.Coverage {
		fmt.Fprintf(w, "VIOLATION [coverage]: %s acquired nothing\n", c)
	}
	if res.Leftover != "" {
		fmt.Fprintf(w, "VIOLATION [leftover]: %s\n", res.Leftover)
	}
	res.Report.Print(w)
	fmt.Fprintf(w, "mixed: %d acquisitions by the old build, %d by the new, %d faults, %d violations\n",
		total(res.Acquisitions[cfg.Old.Label]), total(res.Acquisitions[cfg.New.Label]), res.Report.FaultCount(), res.Violations())
}

func total(m map[string]int) int {
	n := 0
	for k, v := range m {
		if !strings.HasSuffix(k, ".transfer") {
			n += v
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
