// Command robustness runs baton's robustness suite against a 3-member
// embedded etcd cluster: random traffic on every primitive, random faults,
// every history checked. `make robustness` builds and runs it.
//
//	robustness -duration 30m -seed 42 -baton /tmp/baton
//
// It prints the seed first, a report at the end whose last line is
//
//	robustness: N operations, M faults (K kinds), H histories checked, V violations, seed S
//
// and exits 1 when V > 0 (2 when the run could not be made).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/integration/robustness"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/planted"
)

func main() {
	if code, ok := robustness.ChildMain(); ok {
		os.Exit(code)
	}
	os.Exit(run())
}

func run() int {
	var (
		cfg    robustness.Config
		faults string
		seed   uint64
	)
	flag.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long the traffic runs (the checks come after)")
	flag.Uint64Var(&seed, "seed", 0, "seed of every random choice; 0 picks one (printed first)")
	flag.IntVar(&cfg.Workers, "workers", 4, "in-process workers, each on its own client")
	flag.IntVar(&cfg.Children, "children", 2, "holder child processes")
	flag.StringVar(&cfg.Baton, "baton", "", "path of a built baton CLI: one more child holds through `baton lock`")
	flag.StringVar(&cfg.Etcdctl, "etcdctl", "", "path of an etcdctl binary: `etcdctl lock` and `etcdctl elect` contend in baton's prefixes")
	flag.DurationVar(&cfg.TTL, "ttl", 3*time.Second, "lease TTL of every holder")
	flag.StringVar(&faults, "faults", "", "comma-separated fault kinds (default: all of "+strings.Join(robustness.FaultKinds(true), ",")+")")
	quiet := flag.Bool("q", false, "no progress lines")
	flag.StringVar(&cfg.HistoryFile, "history", "", "write the whole history to this file, as JSON")
	flag.IntVar(&cfg.Burners, "burn", 0, "CPU burner processes beside the traffic, stopped with it: a machine loaded on purpose")
	bug := flag.String("planted", "", "switch on one deliberate bug of internal/planted ("+planted.Names+"); needs a build with -tags robustness_planted")
	flag.Parse()
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	cfg.Seed = seed
	if *bug != "" {
		if !planted.Available || len(*bug) != 1 || !strings.Contains(planted.Names, *bug) {
			fmt.Fprintf(os.Stderr, "robustness: -planted %q: one of %q, in a build with -tags robustness_planted (this one: %v)\n", *bug, planted.Names, planted.Available)
			return 2
		}
		// The children inherit it.
		if err := os.Setenv(planted.Env, *bug); err != nil {
			fmt.Fprintln(os.Stderr, "robustness:", err)
			return 2
		}
		fmt.Printf("robustness: planted bug %s switched on\n", *bug)
	}
	fmt.Printf("robustness: seed %d (replay: make robustness ROBUSTNESS_SEED=%d)\n", seed, seed)
	if faults != "" {
		cfg.Faults = strings.Split(faults, ",")
	}
	if !*quiet {
		cfg.Log = os.Stdout
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness:", err)
		return 2
	}
	cfg.ChildCmd = func(string) *exec.Cmd { return exec.Command(self) }

	c, err := cluster.New(3, cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness: start cluster:", err)
		return 2
	}
	cfg.Target = robustness.Embedded{C: c}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := robustness.Run(ctx, cfg)
	stop()
	c.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness:", err)
		return 2
	}
	rep.CheckLeaks(cluster.FindLeaks())
	rep.Print(os.Stdout)
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}
