package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/shard"
)

// Config is one run.
type Config struct {
	Target Target
	// Seed decides every random choice; zero picks one from the clock.
	Seed uint64
	// Duration of the traffic; the checks come after. Default 30 s.
	Duration time.Duration
	// Workers in this process, each on its own client, default 4;
	// Observers per observed name, default 1.
	Workers, Observers int
	// Children are holder processes (this program run again through
	// ChildCmd); zero for none. ChildCmd returns the command that runs a
	// child of the given role (see ChildMain).
	Children int
	ChildCmd func(role string) *exec.Cmd
	// Baton is the path of a built `baton` CLI; when set, one more child
	// takes locks through `baton lock NAME -- <child>`.
	Baton string
	// Etcdctl is the path of an etcdctl binary; when set, the etcdctl
	// traffic kind runs `etcdctl lock` and `etcdctl elect` in baton's
	// prefixes.
	Etcdctl string
	// TTL of every lease, default 3 s.
	TTL time.Duration
	// Namespace of every primitive, default "robust".
	Namespace string
	// Faults are the kinds to inject, default every kind the run supports
	// (FaultKinds).
	Faults []string
	// Log receives progress lines; default none.
	Log io.Writer
	// FreeBound is the free-lock check's bound, default DefaultFreeBound.
	FreeBound time.Duration
	// HistoryFile, when set, receives the whole history as JSON.
	HistoryFile string
	// Burners are CPU burner processes (ChildCmd's "burn" role) that run
	// beside the traffic, to make the run on a machine loaded on purpose.
	Burners int
	// MetricLabelLimit is the label limit of each process's Registerer,
	// default DefaultMetricLabelLimit (labels.go).
	MetricLabelLimit int

	names []NameInfo
}

// runner is one run in progress.
type runner struct {
	cfg   Config
	h     *History
	mem   *fencing.MemoryGuard
	log   io.Writer
	admin *clientv3.Client
	// reg has the metrics of the workers, observers and guards, kindsReg
	// the traffic kinds' (labels.go).
	reg, kindsReg *prometheus.Registry

	mu        sync.Mutex
	parts     []*cluster.Partition // every proxied client's, for network faults
	partOf    []string             // whose each is: a worker, an observer or a traffic kind
	children  []*child
	workers   []*worker
	holderSeq int // the candidates' locks aside
	// laneNames are the names the lanes pick from.
	laneNames []NameInfo
	// quietFrom is when the fault loop's current quiet while began; 0
	// while it injects faults.
	quietFrom atomic.Int64
}

// judgedNow says whether a free lock taken now is judged by the
// free-lock check: the fault loop has been quiet for a TTL and two
// seconds (its grace), or injects no faults. A disturbance can still
// excuse it.
func (r *runner) judgedNow() bool {
	if len(r.cfg.Faults) == 0 {
		return true
	}
	q := r.quietFrom.Load()
	return q != 0 && time.Duration(now()-q) > r.cfg.TTL+2*time.Second
}

const (
	workPrefix     = "/robustness/work/"
	registerPrefix = "/robustness/register/"
)

// Run drives traffic and faults for cfg.Duration, then closes everything
// and checks the history. The error is for a run that could not be made
// (no cluster, no client); what the checks find is in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Observers <= 0 {
		cfg.Observers = 1
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.FreeBound <= 0 {
		cfg.FreeBound = DefaultFreeBound
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "robust"
	}
	if cfg.MetricLabelLimit <= 0 {
		cfg.MetricLabelLimit = DefaultMetricLabelLimit
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if (cfg.Children > 0 || cfg.Burners > 0) && cfg.ChildCmd == nil {
		return nil, errors.New("robustness: Children or Burners set without ChildCmd")
	}
	_, cuts := cfg.Target.(PeerCutter)
	if len(cfg.Faults) == 0 {
		cfg.Faults = FaultKinds(cfg.Children > 0 || cfg.Baton != "")
		if !cuts {
			cfg.Faults = slices.DeleteFunc(cfg.Faults, func(k string) bool { return k == FaultMemberIsolate })
		}
	}
	for _, k := range cfg.Faults {
		if !knownFault(k) {
			return nil, fmt.Errorf("robustness: unknown fault kind %q (known: %v)", k, FaultKinds(true))
		}
		if k == FaultMemberIsolate && !cuts {
			return nil, fmt.Errorf("robustness: fault %s needs a target that cuts members from their peers (embedded)", k)
		}
	}
	h := &History{Start: now(), MetricLabelLimit: cfg.MetricLabelLimit, ExplicitLabels: []string{observersLabel}}
	loadBefore := harness.Loadavg()
	meter := harness.StartMeter(now)
	defer meter.Stop()
	admin, err := newClient(cfg.Target.Endpoints())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	watchCli, err := newClient(cfg.Target.Endpoints())
	if err != nil {
		return nil, err
	}
	defer watchCli.Close()
	if cfg.names, err = describeNames(admin, cfg.Namespace); err != nil {
		return nil, err
	}
	h.Names = cfg.names
	r := &runner{cfg: cfg, h: h, log: cfg.Log, admin: admin, reg: prometheus.NewRegistry(), kindsReg: prometheus.NewRegistry()}
	if r.mem, err = fencing.NewMemoryGuardWith(guardOpts(r.reg, cfg.MetricLabelLimit)...); err != nil {
		return nil, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampling := make(chan struct{})
	go func() { defer close(sampling); r.sampleLoop(sampleCtx) }()
	defer func() { stopSampling(); <-sampling }()
	for _, n := range cfg.names {
		if !n.Private {
			r.laneNames = append(r.laneNames, n)
		}
	}
	fmt.Fprintf(r.log, "robustness: seed %d, %v of traffic, %d workers, %d children, %d CPU burners, faults %v\n",
		cfg.Seed, cfg.Duration, cfg.Workers, cfg.Children, cfg.Burners, cfg.Faults)
	stopBurners := r.startBurners(cfg.Burners)
	defer stopBurners()
	events := startEventLog(watchCli, h)
	closeEvents := func() { events.cancel(); <-events.done }

	traffic, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var wg sync.WaitGroup
	var workers []*worker
	for i := 0; i < cfg.Workers; i++ {
		w, err := r.newWorker(i)
		if err != nil {
			stopTraffic()
			wg.Wait()
			r.closeWorkers(workers)
			closeEvents()
			return nil, err
		}
		workers = append(workers, w)
		for lane := 0; lane < 2; lane++ {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100*i+lane+1)))
			wg.Add(1)
			go func() { defer wg.Done(); w.lane(traffic, rng, lane) }()
		}
	}
	var obsWG sync.WaitGroup
	obsCtx, stopObservers := context.WithCancel(context.Background())
	defer stopObservers()
	stream := 0
	for _, n := range cfg.names {
		if !n.Observed {
			continue
		}
		for j := 0; j < cfg.Observers; j++ {
			o, err := r.newObserver(n, len(r.parts))
			if err != nil {
				stopTraffic()
				wg.Wait()
				r.closeWorkers(workers)
				closeEvents()
				return nil, err
			}
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(10000+stream)))
			stream += 1000
			obsWG.Add(1)
			go func() { defer obsWG.Done(); o.run(obsCtx, rng) }()
		}
	}
	kinds := TrafficKinds(cfg.Baton != "")
	if cfg.Etcdctl != "" {
		kinds = append(kinds, TrafficEtcdctl)
	}
	for i, kind := range kinds {
		m, err := r.newMech(i, kind)
		if err != nil {
			stopTraffic()
			wg.Wait()
			r.closeWorkers(workers)
			closeEvents()
			return nil, err
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(20000+i)))
		wg.Add(1)
		go func() { defer wg.Done(); m.run(traffic, rng) }()
	}
	for i := 0; i < cfg.Children; i++ {
		r.startChild(traffic, i, "")
	}
	if cfg.Baton != "" {
		r.startChild(traffic, cfg.Children, cfg.Baton)
	}

	healthCtx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); r.healthWatch(healthCtx) }()
	probesDone := make(chan struct{})
	go func() { defer close(probesDone); r.roundTrips(healthCtx) }()

	// Faults until the traffic's end, each healed before the next.
	f := &faulter{r: r, events: events, rng: rand.New(rand.NewPCG(cfg.Seed, 0xfa))}
	deadline := time.Now().Add(cfg.Duration)
	f.loop(traffic, deadline)
	stopTraffic()
	stopBurners()
	f.healAll()
	fmt.Fprintf(r.log, "robustness: traffic stopped after %v, closing\n", time.Duration(now()-h.Start).Round(time.Second))
	wg.Wait()
	r.stopChildren()
	r.sampleAll() // every increment made
	r.closeWorkers(workers)
	stopSampling()
	<-sampling
	if err := r.waitHealthy(ctx); err != nil {
		fmt.Fprintf(r.log, "robustness: cluster not healthy after the run: %v\n", err)
	}
	// Observers run until the state has settled, so that convergence
	// after the last fault can be judged.
	stopHealth()
	<-healthDone
	<-probesDone
	h.Settled = now()
	meter.Stop()
	h.Stalls = meter.Stalls()
	pause(ctx, 2*time.Second)
	stopObservers()
	obsWG.Wait()
	leftover := r.waitNoKeys(ctx)
	ferr := events.finish(ctx, h)
	r.closeParts()
	rep := check(h, cfg)
	rep.Seed = cfg.Seed
	rep.Starvation, rep.LoadBefore, rep.LoadAfter = meter.Starvation(), loadBefore, harness.Loadavg()
	rep.covered(h, kinds)
	if ferr != nil {
		rep.add("event-log", ferr.Error(), 0)
	}
	if leftover != "" {
		rep.add("leftover", leftover, 0)
	}
	rep.Histories++ // the leftover-key check
	if cfg.HistoryFile != "" {
		if err := h.save(cfg.HistoryFile); err != nil {
			fmt.Fprintf(r.log, "robustness: history not saved: %v\n", err)
		}
	}
	return rep, nil
}

// describeNames builds the run's primitives: mutexes m0 and m1 and
// elections e0 and e1 (observed), mutexes m2 (the crowd's), m3 and m4
// (Sets' too), w0 to w2 (the bursts' only), u0 and u1 (the give-up
// kind's), h0 to h7 (held aside by candidates), ld0 (the lock-delay
// kind's) (a lock-delay of 2 s on every contender), v0 and v1 and an
// election ev0 (the unheard kind's), q0 (the serve kind's asked caller's),
// a Preferred election e2 (the
// preferred kind's), a semaphore of limit 2, a read/write lock rw0 and
// rw1 (the twins kind's), and the shards of the shard kind's group g0 and
// of the serve kind's sv0.
func describeNames(cli *clientv3.Client, ns string) ([]NameInfo, error) {
	var out []NameInfo
	add := func(prim, name string, limit int, observed bool, prefix string) *NameInfo {
		out = append(out, NameInfo{Prim: prim, Name: name, Prefix: prefix, Limit: limit, Observed: observed,
			Work: workPrefix + prim + "/" + name})
		return &out[len(out)-1]
	}
	for _, name := range []string{"m0", "m1", "m2", "m3", "m4", "ld0", "w0", "w1", "w2", "u0", "u1", "r0", "h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "v0", "v1", "q0"} {
		m, err := mutex.New(cli, name, mutex.WithNamespace(ns))
		if err != nil {
			return nil, err
		}
		n := add("mutex", name, 1, name == "m0" || name == "m1", m.Prefix())
		_ = m.Close()
		// The lanes and holder processes keep to m0 and m1 (with e0, e1,
		// s0 and rw0), so that their contention is what it was before the
		// traffic kinds came: the others are the kinds'.
		n.Private = name != "m0" && name != "m1"
		if name == "ld0" {
			n.Delay, n.DelayPrefix = lockDelay, delay.Prefix(ns, keys.Lock, name)
		}
	}
	for _, name := range []string{"e0", "e1", "e2", "ev0"} {
		e, err := election.New(cli, name, election.WithNamespace(ns))
		if err != nil {
			return nil, err
		}
		n := add("election", name, 1, name == "e0" || name == "e1", e.Prefix())
		n.Preferred, n.Private = name == "e2", name == "e2" || name == "ev0"
		_ = e.Close()
	}
	for id := 0; id < shardCount; id++ {
		n := add("shard", fmt.Sprintf("g0/%05d", id), 1, false, fmt.Sprintf("%ss/%05d/", shard.GroupPrefix(ns, "g0"), id))
		n.Private = true
	}
	for id := 0; id < serveShardCount; id++ { // after g0's: checkOwned judges the first group
		n := add("shard", fmt.Sprintf("%s/%05d", serveShardGroup, id), 1, false, fmt.Sprintf("%ss/%05d/", shard.GroupPrefix(ns, serveShardGroup), id))
		n.Private = true
	}
	s, err := semaphore.New(cli, "s0", 2, semaphore.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	add("semaphore", "s0", 2, false, s.Prefix())
	_ = s.Close()
	rw, err := rwmutex.New(cli, "rw0", rwmutex.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	add("rwmutex", "rw0", 1, false, rw.Prefix())
	_ = rw.Close()
	if rw, err = rwmutex.New(cli, "rw1", rwmutex.WithNamespace(ns)); err != nil {
		return nil, err
	}
	add("rwmutex", "rw1", 1, false, rw.Prefix()).Private = true
	_ = rw.Close()
	g, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(ns))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Fence = g.Key(resource(out[i]))
	}
	return out, nil
}

// lockDelay is ld0's: etcd's shortest lease.
const lockDelay = 2 * time.Second

func (r *runner) newWorker(i int) (*worker, error) {
	cli, part, err := r.proxiedClient(fmt.Sprintf("w%d", i))
	if err != nil {
		return nil, err
	}
	guard, err := fencing.NewEtcdGuard(cli, append(guardOpts(r.reg, r.cfg.MetricLabelLimit), fencing.WithNamespace(r.cfg.Namespace))...)
	if err != nil {
		_ = cli.Close()
		return nil, err // its partition is closed with the others'
	}
	w := &worker{r: r, id: i, cli: cli, part: part, guard: guard, objects: make(map[string]closer)}
	w.clock = newSkewClock(w.client())
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	return w, nil
}

func (r *runner) closeWorkers(ws []*worker) {
	for _, w := range ws {
		w.closeSession(false)
		_ = w.cli.Close()
	}
}

func (r *runner) closeParts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.parts {
		p.Close()
	}
	r.parts = nil
}

func registerKey(n NameInfo) string { return registerPrefix + n.Prim + "/" + n.Name }
func resource(n NameInfo) string    { return n.Prim + "/" + n.Name }

// evidence is a holder's fenced write of its own key to the name's work
// key: committed only while the key exists with the holder's token.
func (r *runner) evidence(client string, n NameInfo, h handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	resp, err := h.Txn(ctx).Then(clientv3.OpPut(n.Work, h.Key())).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("not held")
	}
	r.h.op(Op{Client: client, Kind: n.Prim + ".Txn", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())})
}

// guarded writes the name's register through the etcd guard, with the
// evidence write in the same transaction.
func (r *runner) guarded(id int, client string, g *fencing.EtcdGuard, n NameInfo, h handle, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	_, err := g.Write(ctx, h, resource(n), clientv3.OpPut(registerKey(n), value), clientv3.OpPut(n.Work, h.Key()))
	ret := now()
	op := RegOp{Resource: resource(n), Client: id, Token: int64(h.Token()), Value: value, Call: start, Return: ret}
	switch {
	case err == nil:
		op.Outcome = "accepted"
	case errors.Is(err, fencing.ErrStale):
		op.Outcome = "stale"
	case isLoss(err):
		op.Outcome = "lost"
	default:
		op.Outcome, op.Return = "unknown", 0
	}
	r.h.reg(op)
	r.h.op(Op{Client: client, Kind: "fencing.EtcdGuard.Write", Name: n.Name, Call: start, Return: ret, Err: errString(err), Key: h.Key(), Token: int64(h.Token())})
}

// admitMemory asks the shared in-memory guard to admit the holder's token.
func (r *runner) admitMemory(id int, n NameInfo, h handle) {
	start := now()
	err := r.mem.Admit(context.Background(), resource(n), h.Token())
	op := RegOp{Resource: resource(n), Client: id, Token: int64(h.Token()), Outcome: "accepted", Call: start, Return: now()}
	if err != nil {
		op.Outcome = "stale"
		if !errors.Is(err, fencing.ErrStale) {
			op.Outcome, op.Return = "unknown", 0
		}
	}
	r.h.admit(op)
}

// readRegister reads the name's register, linearizably, and says whether
// it was served.
func (r *runner) readRegister(id int, cli *clientv3.Client, n NameInfo) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := now()
	resp, err := cli.Get(ctx, registerKey(n))
	ret := now()
	if err != nil {
		return false // a failed read has no effect
	}
	op := RegOp{Resource: resource(n), Client: id, Read: true, Call: start, Return: ret}
	if len(resp.Kvs) > 0 {
		op.Value = string(resp.Kvs[0].Value)
	}
	r.h.reg(op)
	return true
}

// waitHealthy waits until every member runs and a write succeeds.
func (r *runner) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = r.admin.Put(wctx, "/robustness/healthy", "")
		cancel()
		if err == nil {
			return nil
		}
		pause(ctx, 200*time.Millisecond)
	}
	return err
}

// waitNoKeys waits, up to twice the TTL and more, for every contender key
// to go (a lease whose owner closed while cut off expires by itself), and
// describes what is left.
func (r *runner) waitNoKeys(ctx context.Context) string {
	deadline := time.Now().Add(2*r.cfg.TTL + 10*time.Second)
	var left []string
	for {
		left = left[:0]
		for _, n := range r.cfg.names {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err := r.admin.Get(gctx, n.Prefix, clientv3.WithPrefix())
			cancel()
			if err != nil {
				left = append(left, fmt.Sprintf("%s: %v", n.Prefix, err))
				continue
			}
			for _, kv := range resp.Kvs {
				if isContender(n, string(kv.Key)) {
					left = append(left, fmt.Sprintf("%s (lease %x, token %d)", kv.Key, kv.Lease, kv.CreateRevision))
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		pause(ctx, 250*time.Millisecond)
	}
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprintf("%d keys left after every process closed: %v", len(left), left)
}
