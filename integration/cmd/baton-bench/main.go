// Command baton-bench runs baton and etcd's own concurrency package side
// by side on one embedded etcd member (fsync on), prints each measure for
// both with their ratio, and writes the results as JSON.
//
//	baton-bench [-runs 3] [-duration 3s] [-held 10000] [-waiters 1000] [-only contend,graceful] [-json bench.json]
//	baton-bench -primitives [-runs 5] [-duration 2s] [-contenders 8] [-json primitives.json]
//
// With -primitives it compares baton's rwmutex with etcd's recipes RWMutex
// and baton's semaphore with N raw concurrency mutexes instead.
//
// The held-locks workload runs in a child process (baton-bench held-client)
// so that the heap it measures is the client's alone; the serve-* workloads'
// server (the serve package's, as `baton serve` runs it) runs in one too
// (baton-bench serve-server), so that serve-held's heap is the server's
// alone.
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
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/integration/bench"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "held-client" {
		return harness.HeldClient(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve-server" {
		return bench.ServeServer(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("baton-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.Config
	fs.IntVar(&cfg.Runs, "runs", 3, "runs of every workload per implementation (median, min and max are reported)")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of each throughput and contention run")
	fs.IntVar(&cfg.Contenders, "contenders", 8, "goroutines contending for one key")
	fs.IntVar(&cfg.Trials, "trials", 100, "graceful failover trials per run")
	fs.DurationVar(&cfg.Settle, "settle", 120*time.Millisecond, "how long a queued follower waits before the leader goes")
	fs.IntVar(&cfg.CrashTrials, "crash-trials", 3, "crash failover trials per run")
	fs.IntVar(&cfg.Held, "held", 10000, "locks held on one session")
	fs.DurationVar(&cfg.HeldWindow, "held-window", 6*time.Second, "how long renewals are counted while the locks are held")
	fs.IntVar(&cfg.Waiters, "waiters", 1000, "waiters queued on one key")
	fs.IntVar(&cfg.ServeHolds, "serve-holds", 1000, "Hold streams open at once in the serve-held workload")
	primitives := fs.Bool("primitives", false, "compare the rwmutex and semaphore packages (workloads: "+strings.Join(bench.PrimitiveWorkloads(), ",")+")")
	shards := fs.Bool("shards", false, "run the shards workload instead: shards over members, joins, crashed members")
	var scfg bench.ShardsConfig
	fs.IntVar(&scfg.Shards, "shard-count", 256, "shards of the shards workload")
	fs.IntVar(&scfg.Members, "shard-members", 8, "members of the shards workload, the last of which joins and leaves")
	fs.IntVar(&scfg.Joins, "shard-joins", 20, "joins of the shards workload")
	only := fs.String("only", "", "comma-separated workloads to run, of: "+strings.Join(bench.Workloads(), ","))
	jsonPath := fs.String("json", "bench.json", "file to write the results to as JSON; empty for none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.Runs < 1 {
		fmt.Fprintln(stderr, "baton-bench: -runs must be at least 1")
		return 2
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
		have := bench.Workloads()
		if *primitives {
			have = bench.PrimitiveWorkloads()
		}
		for _, w := range cfg.Only {
			if !contains(have, w) {
				fmt.Fprintf(stderr, "baton-bench: no workload %q (have %s)\n", w, strings.Join(have, ", "))
				return 2
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "baton-bench: %v\n", err)
		return 1
	}
	cfg.HeldCommand = []string{exe}
	cfg.ServeCommand = []string{exe}

	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		fmt.Fprintf(stderr, "baton-bench: %v\n", err)
		return 1
	}
	defer srv.Stop()
	if *shards {
		rep, err := bench.RunShards(ctx, srv, scfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "baton-bench: %v\n", err)
			return 1
		}
		return report(stdout, stderr, rep, *jsonPath)
	}
	runBench := bench.Run
	if *primitives {
		runBench = bench.RunPrimitives
	}
	rep, err := runBench(ctx, srv, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "baton-bench: %v\n", err)
		return 1
	}
	return report(stdout, stderr, rep, *jsonPath)
}

// report prints rep and writes it as JSON to jsonPath (none if empty).
func report(stdout, stderr io.Writer, rep interface{ Print(io.Writer) error }, jsonPath string) int {
	fmt.Fprintln(stdout)
	if err := rep.Print(stdout); err != nil {
		return 1
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "baton-bench: write %s: %v\n", jsonPath, err)
			return 1
		}
		fmt.Fprintf(stdout, "\nresults written to %s\n", jsonPath)
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
