// Command baton-scale measures baton at scale on embedded etcd members
// (fsync on), next to raw etcd concurrency where raw can do the same, and
// prints one summary line on stdout; progress goes to stderr, every figure
// to a JSON file (docs/scaling.md).
//
//	baton-scale [-quick] [-only held,waiters,server,storm,processes,fleet,shards,cold,clusters] [-held 100000] [-waiters 10000] [-clients 10] [-json scale.json]
//
// Phases: held (locks held on one session, in a child process), waiters
// (a queue on one name, drained), server (etcd's watchers, keys and db
// bytes per lock and per waiter), storm (holders cut off from etcd past
// their leases, then back), processes (many OS processes against one
// etcd), fleet (50 processes of 1 and of 10 sessions in one namespace,
// baton and raw: the member's watch events per acquisition), shards (a
// shard group of 4,096 over 50 processes, restarted in turn), cold (the
// same group's 50 processes started at once), clusters
// (the router over several embedded clusters).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/integration/scale"
	"github.com/batonhq/baton/internal/embedetcd"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(runChild(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// phases are every phase, in the order they run.
var phases = []string{"held", "waiters", "server", "storm", "processes", "fleet", "shards", "cold", "clusters"}

// options are the command's flags.
type options struct {
	quick        bool
	only         []string
	held         int
	heldSmall    int
	heldRuns     int
	waiters      int
	clients      int
	waiterRuns   int
	rawWaiters   int
	jsonPath     string
	cpuProfile   string
	deadline     time.Duration
	shardMembers int
	shardCount   int
	coldProfile  string
	// Set by the phase file of the storm, processes and clusters phases.
	processes, processLocks int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "held-client" {
		return harness.HeldClient(ctx, args[1:], stdout, stderr)
	}
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "baton-scale: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "baton-scale: -cpuprofile: %v\n", err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	rep, err := measure(ctx, o, stderr)
	if rep != nil && o.jsonPath != "" {
		if b, jerr := json.MarshalIndent(rep, "", "  "); jerr == nil {
			jerr = os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
			if jerr != nil {
				fmt.Fprintf(stderr, "baton-scale: write %s: %v\n", o.jsonPath, jerr)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "baton-scale: %v\n", err)
		if rep != nil {
			fmt.Fprintln(stdout, scale.Summarize(rep.Summary)) // what ran before it
		}
		return 1
	}
	fmt.Fprintln(stdout, scale.Summarize(rep.Summary))
	if problems := rep.Summary.Problems(); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "baton-scale: FAILED: %s\n", p)
		}
		return 1
	}
	return 0
}

// parse reads and checks the flags, before anything starts.
func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("baton-scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	only := fs.String("only", "", "comma-separated phases to run, of: "+strings.Join(phases, ","))
	fs.BoolVar(&o.quick, "quick", false, "small sizes for a smoke run (a minute or two)")
	fs.IntVar(&o.held, "held", 100_000, "locks held on one session")
	fs.IntVar(&o.heldSmall, "held-small", 1000, "locks held when renewals are compared with -held")
	fs.IntVar(&o.heldRuns, "held-runs", 2, "runs of each held size and implementation (median, min and max)")
	fs.IntVar(&o.waiters, "waiters", 10_000, "waiters queued on one name")
	fs.IntVar(&o.clients, "clients", 10, "etcd clients the waiters are spread over")
	fs.IntVar(&o.waiterRuns, "waiter-rounds", 25, "drains of the 8-waiter queue whose handoff p99 is the baseline")
	fs.IntVar(&o.rawWaiters, "raw-waiters", 1000, "largest queue raw etcd concurrency drains too (0: none)")
	fs.IntVar(&o.shardMembers, "shard-members", 0, "member processes of the shards and cold phases (0: 50, 5 with -quick)")
	fs.IntVar(&o.shardCount, "shard-count", 0, "shards of the shards phase's large group and of the cold phase's (0: 4096, 256 with -quick)")
	fs.StringVar(&o.coldProfile, "cold-profile", "", "directory where each member process of the cold phase writes its CPU profile")
	fs.StringVar(&o.jsonPath, "json", "scale.json", "file to write every figure to as JSON; empty for none")
	fs.DurationVar(&o.deadline, "deadline", 20*time.Minute, "bound on the whole run")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server and clients) to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"held": func() { o.held = 2000 }, "held-small": func() { o.heldSmall = 200 }, "held-runs": func() { o.heldRuns = 1 },
			"waiters": func() { o.waiters = 300 }, "waiter-rounds": func() { o.waiterRuns = 5 }, "raw-waiters": func() { o.rawWaiters = 100 },
		}
		for name, f := range quick {
			if !set[name] {
				f()
			}
		}
	}
	if *only != "" {
		for _, p := range strings.Split(*only, ",") {
			if !slices.Contains(phases, p) {
				return o, fmt.Errorf("-only: no phase %q (have %s)", p, strings.Join(phases, ", "))
			}
			o.only = append(o.only, p)
		}
	}
	if err := checkSizes(o); err != nil {
		return o, err
	}
	return o, nil
}

func (o options) runs(phase string) bool { return len(o.only) == 0 || slices.Contains(o.only, phase) }

// report is everything measured, written as JSON.
type report struct {
	Started    time.Time             `json:"started"`
	Finished   time.Time             `json:"finished"`
	CPUs       int                   `json:"cpus"`
	LoadBefore string                `json:"load_before"`
	LoadAfter  string                `json:"load_after"`
	Held       *scale.HeldResult     `json:"held,omitempty"`
	Waiters    []scale.WaitersResult `json:"waiters,omitempty"`
	Server     *scale.ServerCost     `json:"server,omitempty"`
	// Storm, Processes, Shards, Cold and Clusters are those phases' results.
	Storm     any           `json:"storm,omitempty"`
	Processes any           `json:"processes,omitempty"`
	Fleet     any           `json:"fleet,omitempty"`
	Shards    any           `json:"shards,omitempty"`
	Cold      any           `json:"cold,omitempty"`
	Clusters  any           `json:"clusters,omitempty"`
	Summary   scale.Summary `json:"summary"`
}

// measure runs the phases; the first three share one embedded member.
func measure(ctx context.Context, o options, progress io.Writer) (*report, error) {
	rep := &report{Started: time.Now(), CPUs: scale.CPUs(), LoadBefore: harness.Loadavg()}
	rep.Summary = scale.Summary{Held: o.held, HeldSmall: o.heldSmall, Waiters: o.waiters}
	defer func() { rep.Finished, rep.LoadAfter = time.Now(), harness.Loadavg() }()
	fmt.Fprintf(progress, "baton-scale: phases %s, load %s\n", strings.Join(o.phaseList(), ","), rep.LoadBefore)
	if o.runs("held") || o.runs("waiters") || o.runs("server") {
		srv, err := embedetcd.New(embedetcd.Config{})
		if err != nil {
			return rep, err
		}
		defer srv.Stop()
		floor, err := harness.MeasureFloor(srv.Dir())
		if err != nil {
			return rep, err
		}
		rep.Summary.Floor = floor
		fmt.Fprintf(progress, "embedded etcd at %s (fsync on): fdatasync p50 %.2f ms p99 %.2f ms\n", srv.Endpoint(), floor.P50ms, floor.P99ms)
		if o.runs("held") {
			if err := heldPhase(ctx, o, srv.Endpoint(), rep, progress); err != nil {
				return rep, err
			}
		}
		if o.runs("waiters") {
			if err := waitersPhase(ctx, o, srv.Endpoint(), rep, progress); err != nil {
				return rep, err
			}
		}
		if o.runs("server") {
			if err := serverPhase(ctx, o, srv.Endpoint(), rep, progress); err != nil {
				return rep, err
			}
		}
	}
	for _, p := range others {
		if !o.runs(p.name) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(progress, "phase %s: started\n", p.name)
		if err := p.run(ctx, o, rep, progress); err != nil {
			// The phase failed: the summary says so, the next phases run.
			fmt.Fprintf(progress, "phase %s: failed after %.1fs: %v\n", p.name, time.Since(start).Seconds(), err)
			rep.Summary.Failures = append(rep.Summary.Failures, fmt.Sprintf("%s: %v", p.name, err))
			switch p.name {
			case "storm":
				rep.Summary.StormRan = true
			case "processes":
				rep.Summary.ProcessesRan = true
			case "fleet":
				rep.Summary.FleetRan = true
			}
			if ctx.Err() != nil {
				return rep, err
			}
			continue
		}
		fmt.Fprintf(progress, "phase %s: done in %.1fs\n", p.name, time.Since(start).Seconds())
	}
	return rep, nil
}

func (o options) phaseList() []string {
	if len(o.only) > 0 {
		return o.only
	}
	return phases
}

// other is a phase of another file (storm, processes, clusters), which
// runs its own members.
type other struct {
	name string
	run  func(ctx context.Context, o options, rep *report, progress io.Writer) error
}

func heldPhase(ctx context.Context, o options, endpoint string, rep *report, progress io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := scale.DefaultHeldConfig()
	cfg.Locks, cfg.Small, cfg.Runs, cfg.Command = o.held, o.heldSmall, o.heldRuns, []string{exe}
	start := time.Now()
	fmt.Fprintf(progress, "phase held: %d locks on one session (and %d), %d run(s) each, baton and raw\n", cfg.Locks, cfg.Small, cfg.Runs)
	r, err := scale.Held(ctx, endpoint, cfg, progress)
	if err != nil {
		return err
	}
	rep.Held = &r
	rep.Summary.HeldResult = &r
	fmt.Fprintf(progress, "phase held: done in %.1fs: heap %s B/lock, goroutines/lock %.4f, keepalives/ttl %s @%d %s @%d, acquire %s s vs raw %s s (%.2fx); server +%.0f watchers, %.3f keys/lock, %.0f db B/lock\n",
		time.Since(start).Seconds(), r.HeapPerLock, r.GoroutinesPerLock, r.KeepAlivesPerTTLSmall, r.Small, r.KeepAlivesPerTTL, r.Locks,
		r.AcquireSeconds, r.RawAcquireSeconds, r.AcquireRatio, r.Server.Watchers, r.KeysPerLock, r.DBBytesPerLock)
	return nil
}

func waitersPhase(ctx context.Context, o options, endpoint string, rep *report, progress io.Writer) error {
	start := time.Now()
	runs := scale.WaitersRuns(o.waiters, o.clients, o.waiterRuns, o.rawWaiters)
	fmt.Fprintf(progress, "phase waiters: %d runs up to %d waiters over %d clients\n", len(runs), o.waiters, o.clients)
	for _, cfg := range runs {
		t := time.Now()
		r, err := scale.Waiters(ctx, endpoint, cfg, progress)
		if err != nil {
			return err
		}
		rep.Waiters = append(rep.Waiters, r)
		fmt.Fprintf(progress, "  waiters %d (%s, %d clients, %d rounds) in %.1fs: queue %.1fs, drain %.2fs, handoff p50 %v p99 %v, requests/handoff %.2f, events/handoff %.2f, watch messages/handoff %.2f, server ranges %.2f txns %.2f per handoff, cpu %v/handoff, keepalives %.0f/s, out of order %d, left %d keys %.0f watchers\n",
			r.Waiters, r.Impl, r.Clients, r.Rounds, time.Since(t).Seconds(), r.QueueSeconds, r.DrainSeconds, r.HandoffP50.Round(10*time.Microsecond), r.HandoffP99.Round(10*time.Microsecond),
			r.RequestsPerHandoff, r.EventsPerHandoff, r.WatchMessagesPerHandoff, r.ServerRangesPerHandoff, r.ServerTxnsPerHandoff, r.CPUPerHandoff.Round(time.Microsecond), r.KeepAlivesPerSecond, r.OutOfOrder, r.KeysLeft, r.WatchersLeft)
	}
	rep.Summary.WaitersResults = rep.Waiters
	fmt.Fprintf(progress, "phase waiters: done in %.1fs\n", time.Since(start).Seconds())
	return nil
}

func serverPhase(ctx context.Context, o options, endpoint string, rep *report, progress io.Writer) error {
	start := time.Now()
	cfg := scale.DefaultServerCostConfig()
	if o.quick {
		cfg.Locks, cfg.Waiters = 2000, 200
	}
	fmt.Fprintf(progress, "phase server: %d locks over %d sessions and %d namespaces, %d waiters\n", cfg.Locks, cfg.Sessions, cfg.Namespaces, cfg.Waiters)
	r, err := scale.MeasureServerCost(ctx, endpoint, cfg)
	if err != nil {
		return err
	}
	rep.Server = &r
	rep.Summary.Server = &r
	fmt.Fprintf(progress, "phase server: done in %.1fs: held: %.0f watchers for %d sessions × %d namespaces (%.5f per lock), %.3f keys/lock, %.0f db B/lock; waiters: %.3f watchers/waiter, %.3f keys/waiter, %.0f db B/waiter\n",
		time.Since(start).Seconds(), r.HeldWatchers, cfg.Sessions, cfg.Namespaces, r.WatchersPerLock, r.KeysPerLock, r.DBBytesPerLock, r.WatchersPerWaiter, r.KeysPerWaiter, r.DBBytesPerWaiter)
	return nil
}

// Per-item estimates behind the memory bound (client and server together,
// measured by this program with some headroom), and the descriptors each
// etcd client costs this process (its socket and the member's).
const (
	heldBytes    = 8 << 10
	waiterBytes  = 128 << 10
	fdsPerClient = 2
	fdsReserved  = 256 // the member's files, listeners and the phases' own clients
)

// checkSizes refuses counts the phases cannot take, before anything
// starts: each error names the flag and its bound.
func checkSizes(o options) error {
	var errs []error
	atLeast := func(flag string, v, lo int) {
		if v < lo {
			errs = append(errs, fmt.Errorf("-%s must be at least %d, got %d", flag, lo, v))
		}
	}
	atLeast("held", o.held, 1)
	atLeast("held-small", o.heldSmall, 0)
	if o.heldSmall > o.held {
		errs = append(errs, fmt.Errorf("-held-small must be at most -held (%d), got %d", o.held, o.heldSmall))
	}
	atLeast("held-runs", o.heldRuns, 1)
	atLeast("waiters", o.waiters, 1)
	atLeast("clients", o.clients, 1)
	if o.clients > o.waiters && o.waiters >= 1 {
		errs = append(errs, fmt.Errorf("-clients must be at most -waiters (%d), got %d", o.waiters, o.clients))
	}
	atLeast("waiter-rounds", o.waiterRuns, 1)
	atLeast("raw-waiters", o.rawWaiters, 0)
	if o.deadline <= 0 {
		errs = append(errs, fmt.Errorf("-deadline must be positive, got %v", o.deadline))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if limit, ok := scale.OpenFileLimit(); ok {
		if need := uint64(o.clients*fdsPerClient + fdsReserved); need > limit {
			errs = append(errs, fmt.Errorf("-clients %d needs about %d file descriptors (%d per client and %d for the member), more than RLIMIT_NOFILE allows (%d): lower -clients or raise ulimit -n",
				o.clients, need, fdsPerClient, fdsReserved, limit))
		}
	}
	if avail, ok := scale.MemAvailable(); ok {
		if o.runs("held") {
			if need := uint64(o.held) * heldBytes; need > avail {
				errs = append(errs, fmt.Errorf("-held %d needs about %d MiB (%d KiB per held lock, client and server), more than the %d MiB available (MemAvailable): lower -held",
					o.held, need>>20, heldBytes>>10, avail>>20))
			}
		}
		if o.runs("waiters") {
			if need := uint64(o.waiters) * waiterBytes; need > avail {
				errs = append(errs, fmt.Errorf("-waiters %d needs about %d MiB (%d KiB per waiter: a session, a lease and a watch each, client and server), more than the %d MiB available (MemAvailable): lower -waiters",
					o.waiters, need>>20, waiterBytes>>10, avail>>20))
			}
		}
	}
	return errors.Join(errs...)
}
