package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
)

// Config scales the workloads. The zero value of a field picks its default.
type Config struct {
	// Runs of every workload per implementation; at least 3 for a median
	// with a spread.
	Runs int `json:"runs"`
	// Duration of each throughput and contention run.
	Duration time.Duration `json:"duration_ns"`
	// Contenders on one key.
	Contenders int `json:"contenders"`
	// Trials of graceful failover per run.
	Trials int `json:"trials"`
	// Settle is how long a queued follower waits before the leader goes,
	// so that its wait is established as a standby's would be.
	Settle time.Duration `json:"settle_ns"`
	// CrashTrials per run, and the lease TTL they use.
	CrashTrials int           `json:"crash_trials"`
	CrashTTL    time.Duration `json:"crash_ttl_ns"`
	// Held locks on one session, the session's TTL, and how long renewals
	// are counted.
	Held       int           `json:"held"`
	HeldTTL    time.Duration `json:"held_ttl_ns"`
	HeldWindow time.Duration `json:"held_window_ns"`
	// Waiters queued on one key.
	Waiters int `json:"waiters"`
	// Only, when not empty, names the workloads to run.
	Only []string `json:"only,omitempty"`
	// HeldCommand, when set, runs the held-locks workload in a child
	// process: the command is run with "held-client" and flags appended,
	// and must print a HeldResult as JSON (the baton-bench program does).
	// Unset, the workload runs in this process, and its heap figure then
	// includes the embedded server's share.
	HeldCommand []string `json:"-"`
	// ServeHolds is how many Hold streams the serve-held workload opens.
	ServeHolds int `json:"serve_holds"`
	// ServeCommand, when set, runs the serve-* workloads' server in a
	// child process: the command is run with "serve-server" and flags
	// appended, and must run ServeServer (the baton-bench program does).
	// Unset, the server runs in this process, and serve-held's heap figure
	// then includes the clients' share.
	ServeCommand []string `json:"-"`
}

// Defaults fills the zero fields.
func (c Config) Defaults() Config {
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.Runs, 3)
	setD(&c.Duration, 3*time.Second)
	set(&c.Contenders, 8)
	set(&c.Trials, 100)
	setD(&c.Settle, 120*time.Millisecond)
	set(&c.CrashTrials, 3)
	setD(&c.CrashTTL, 2*time.Second)
	set(&c.Held, 10000)
	setD(&c.HeldTTL, 3*time.Second)
	setD(&c.HeldWindow, 6*time.Second)
	set(&c.Waiters, 1000)
	set(&c.ServeHolds, 1000)
	return c
}

// sessionTTL is the TTL, in seconds, of the sessions the workloads make
// when the lease's TTL plays no part in what they measure.
func (c Config) sessionTTL() int { return 30 }

func (c Config) ttl() time.Duration       { return 30 * time.Second }
func (c Config) waiterTTL() time.Duration { return 60 * time.Second }

// Value is one figure of one run.
type Value struct {
	Metric string  `json:"metric"`
	V      float64 `json:"value"`
}

type env struct {
	cfg      Config
	endpoint string
	cli      *clientv3.Client
	counter  *harness.Counter // counts cli's requests
	dir      string
}

// sideWorkload is a workload whose two sides, baton's and raw etcd's, are
// of type I: harness.Impl, or primImpl for the primitives.
type sideWorkload[I interface{ Name() string }] struct {
	name string
	run  func(ctx context.Context, env *env, impl I, name string) ([]Value, error)
}

type workload = sideWorkload[harness.Impl]

// Workloads are the workload names, in the order they run.
func Workloads() []string {
	var out []string
	for _, w := range workloads() {
		out = append(out, w.name)
	}
	return out
}

func workloads() []workload {
	return []workload{
		{"lock-unlock-shared", lockUnlockShared},
		{"lock-unlock-per-lock", lockUnlockPerLock},
		{"distinct-16", distinctKeys(16)},
		{"distinct-64", distinctKeys(64)},
		{"contend", contend},
		{"contend-lock-delay", contendLockDelay},
		{"set-ab", setPair},
		{"graceful", graceful},
		{"handover", handover},
		{"crash", crash},
		{"held", held},
		{"waiters", waiters},
		{"serve-cycle", serveCycle},
		{"serve-handoff", serveHandoff},
		{"serve-held", serveHeld},
	}
}

// Measure is one figure over every run of both implementations.
type Measure struct {
	Workload string          `json:"workload"`
	Metric   string          `json:"metric"`
	Baton    harness.Summary `json:"baton"`
	Raw      harness.Summary `json:"raw"`
	// Ratio is baton's median over raw's.
	Ratio  float64 `json:"ratio"`
	Target string  `json:"target,omitempty"`
	// Met is set when the measure has a target, and was judged.
	Met *bool `json:"met,omitempty"`
	// Starved counts the runs of the workload, of either side, during
	// which the process was starved (benchStarvedIf); Runs counts them
	// all. A timing measure with a starved run is not judged.
	Starved int `json:"starved_runs,omitempty"`
	Runs    int `json:"runs"`
}

// benchStarvedIf is when one run of a workload counts as starved: its
// figures are milliseconds (a handoff's p99 target is 5 ms), so a run
// that lost 1 % of its time, or 50 ms at once, was not measured on the
// machine its figures claim.
var benchStarvedIf = harness.StarvedIf{Share: 0.01, Max: 50 * time.Millisecond}

// timing reports whether metric is a time, a rate or a share of one,
// which a starved run distorts; counts of requests, heap, stacks,
// resident set and goroutines are not.
func timing(metric string) bool {
	switch {
	case strings.Contains(metric, "heap"), strings.Contains(metric, "goroutines"), strings.Contains(metric, "RSS"), strings.Contains(metric, "stack"),
		strings.HasPrefix(metric, "requests/"), strings.HasPrefix(metric, "etcd requests/"),
		metric == "renewals/s", metric == "other requests/s":
		return false
	}
	return true
}

// Report is a whole run of the benchmark.
type Report struct {
	// Compared names the two sides when they are not baton's mutex and
	// election against etcd's concurrency package (RunPrimitives).
	Compared  string    `json:"compared,omitempty"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	GoVersion string    `json:"go_version"`
	CPUs      int       `json:"cpus"`
	// LoadBefore and LoadAfter are /proc/loadavg at the start and end.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Config     Config `json:"config"`
	// Fdatasync is the disk's floor: p50 and p99 of a 4 KiB write and
	// fdatasync in etcd's data directory, once per round.
	FdatasyncP50 harness.Summary `json:"fdatasync_p50_ms"`
	FdatasyncP99 harness.Summary `json:"fdatasync_p99_ms"`
	// Starvation is what a meter of this process's scheduling saw over the
	// whole bench (harness.Meter); StarvedRuns counts the workload runs
	// that were starved, of Runs.
	Starvation  harness.Starvation `json:"starvation"`
	StarvedRuns int                `json:"starved_runs"`
	Runs        int                `json:"runs"`
	Measures    []Measure          `json:"measures"`
}

// Starved reports whether any run of the report was starved: its timings
// are then not all results.
func (rep *Report) Starved() bool { return rep.StarvedRuns > 0 }

// Run runs every workload cfg.Runs times per implementation against srv,
// alternating which implementation goes first, and reports progress on
// progress.
func Run(ctx context.Context, srv *embedetcd.Server, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.Defaults()
	counter := harness.NewCounter()
	cli, err := harness.NewClient(srv.Endpoint(), counter)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	e := &env{cfg: cfg, endpoint: srv.Endpoint(), cli: cli, counter: counter, dir: srv.Dir()}
	rep := &Report{Started: time.Now(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), LoadBefore: harness.Loadavg(), Config: cfg}
	if err := runRounds(ctx, e, rep, workloads(), harness.Impls, 22, progress); err != nil {
		return nil, err
	}
	for i := range rep.Measures {
		judge(rep, &rep.Measures[i])
	}
	rep.LoadAfter = harness.Loadavg()
	rep.Finished = time.Now()
	return rep, nil
}

// held runs the held-locks workload, in a child process when configured;
// baton's once per way its session is made.
func held(ctx context.Context, env *env, impl harness.Impl, _ string) ([]Value, error) {
	vias := []string{"wrap"}
	if impl.Name() == "baton" {
		vias = append(vias, "new", "etcd")
	}
	var out []Value
	for _, via := range vias {
		vs, err := heldVia(ctx, env, impl, via)
		if err != nil {
			return nil, fmt.Errorf("via %s: %w", via, err)
		}
		out = append(out, vs...)
	}
	return out, nil
}

func heldVia(ctx context.Context, env *env, impl harness.Impl, via string) ([]Value, error) {
	c := env.cfg
	if len(c.HeldCommand) == 0 {
		r, err := harness.HoldMany(ctx, env.endpoint, impl, via, c.Held, c.HeldTTL, c.HeldWindow)
		if err != nil {
			return nil, err
		}
		return heldValues(r), nil
	}
	r, err := harness.HoldManyIn(ctx, c.HeldCommand, env.endpoint, impl.Name(), via, c.Held, c.HeldTTL, c.HeldWindow)
	if err != nil {
		return nil, err
	}
	return heldValues(r), nil
}

func heldValues(r harness.HeldResult) []Value {
	if r.Via != "" && r.Via != "wrap" {
		sfx := map[string]string{"new": " (session.New)", "etcd": " (WithSession(etcd session))"}[r.Via]
		return []Value{
			{Metric: "heap bytes/lock" + sfx, V: r.HeapPerLock},
			{Metric: "goroutines/lock" + sfx, V: r.GoroutinesPerLock},
			{Metric: "lock all s" + sfx, V: r.LockSeconds},
		}
	}
	return []Value{
		{Metric: "heap bytes/lock", V: r.HeapPerLock},
		{Metric: "goroutines/lock", V: r.GoroutinesPerLock},
		{Metric: "renewals/s", V: r.RenewalsPerSecond},
		{Metric: "other requests/s", V: r.OtherPerSecond},
		{Metric: "lock all s", V: r.LockSeconds},
	}
}

// runRounds runs every workload of ws (but those cfg.Only leaves out)
// cfg.Runs times per side, alternating which of the two sides goes first,
// reports each run on progress (the workload's name padded to width), and
// sets rep's fdatasync floors and Measures: each metric's runs per side,
// in the order the metrics first came.
func runRounds[I interface{ Name() string }](ctx context.Context, e *env, rep *Report, ws []sideWorkload[I], sides []I, width int, progress io.Writer) error {
	values := map[string][]float64{} // workload \x00 metric \x00 side
	var order []string               // workload \x00 metric
	var fsP50, fsP99 []float64
	starved, runs := map[string]int{}, map[string]int{} // by workload
	meter := harness.StartMeter(nil)
	defer func() { meter.Stop(); rep.Starvation = meter.Starvation() }()
	for round := range e.cfg.Runs {
		floor, err := startRound(progress, e.dir, round, e.cfg.Runs)
		if err != nil {
			return err
		}
		fsP50, fsP99 = append(fsP50, floor.P50ms), append(fsP99, floor.P99ms)
		for _, w := range ws {
			if len(e.cfg.Only) > 0 && !slices.Contains(e.cfg.Only, w.name) {
				continue
			}
			impls := sides
			if round%2 == 1 {
				impls = []I{sides[1], sides[0]}
			}
			for _, impl := range impls {
				start := time.Now()
				name := fmt.Sprintf("%s-%s-%d-%d", w.name, impl.Name(), round, start.UnixNano())
				vs, err := w.run(ctx, e, impl, name)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", w.name, impl.Name(), round+1, err)
				}
				st := harness.Within(meter.Stalls(), start.UnixNano(), time.Now().UnixNano())
				runs[w.name]++
				rep.Runs++
				mark := ""
				if st.Starved(benchStarvedIf) {
					starved[w.name]++
					rep.StarvedRuns++
					mark = fmt.Sprintf(" STARVED (%v lost, the longest %v)", st.Lost.Round(time.Millisecond), st.Max.Round(time.Millisecond))
				}
				fmt.Fprintf(progress, "  %-*s %-5s %6.1fs%s ", width, w.name, impl.Name(), time.Since(start).Seconds(), mark)
				for _, v := range vs {
					fmt.Fprintf(progress, " %s=%.3g", v.Metric, v.V)
					key := w.name + "\x00" + v.Metric
					if !slices.Contains(order, key) {
						order = append(order, key)
					}
					values[key+"\x00"+impl.Name()] = append(values[key+"\x00"+impl.Name()], v.V)
				}
				fmt.Fprintln(progress)
			}
		}
	}
	rep.FdatasyncP50, rep.FdatasyncP99 = harness.Summarize(fsP50), harness.Summarize(fsP99)
	for _, key := range order {
		wl, metric, _ := strings.Cut(key, "\x00")
		m := Measure{Workload: wl, Metric: metric, Baton: harness.Summarize(values[key+"\x00baton"]), Raw: harness.Summarize(values[key+"\x00raw"]),
			Starved: starved[wl], Runs: runs[wl]}
		if m.Raw.Median != 0 {
			m.Ratio = m.Baton.Median / m.Raw.Median
		}
		rep.Measures = append(rep.Measures, m)
	}
	return nil
}

// startRound measures the disk's floor at the start of round (from 0) of
// runs, and says so with the machine's load.
func startRound(progress io.Writer, dir string, round, runs int) (harness.Floor, error) {
	floor, err := harness.MeasureFloor(dir)
	if err != nil {
		return floor, err
	}
	fmt.Fprintf(progress, "round %d/%d: fdatasync p50 %.2f ms p99 %.2f ms, load %s\n", round+1, runs, floor.P50ms, floor.P99ms, harness.Loadavg())
	return floor, nil
}
