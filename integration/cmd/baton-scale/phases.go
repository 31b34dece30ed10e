package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/batonhq/baton/integration/scale"
)

// others are the phases that run their own members: storm, processes,
// shards, cold and clusters (integration/scale's storm.go, processes.go,
// shards.go, coldstart.go, clusters.go).
var others = []other{
	{"storm", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		cfg := scale.DefaultStormConfig()
		if o.quick {
			cfg.Locks, cfg.Sessions, cfg.Outage, cfg.TTL, cfg.Quiet, cfg.Floor = 2000, 4, 5*time.Second, 2*time.Second, time.Second, 3*time.Second
		}
		r, err := scale.Storm(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Storm = r
		rep.Summary.StormRan, rep.Summary.StormOK, rep.Summary.StormSeconds = true, r.OK, r.RecoverySeconds
		rep.failed("storm", r.Failures)
		return nil
	}},
	{"processes", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg := scale.DefaultProcessesConfig()
		cfg.Binary = exe
		if o.quick {
			cfg.Processes, cfg.Locks = 5, 200
		}
		r, err := scale.Processes(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Processes = r
		rep.Summary.ProcessesRan, rep.Summary.ProcessesOK = true, r.OK
		rep.Summary.Processes, rep.Summary.ProcessLocks = cfg.Processes, cfg.Locks
		rep.failed("processes", r.Failures)
		fmt.Fprintf(progress, "  processes %dx%d: p99 %v\n", cfg.Processes, cfg.Locks, r.P99.Round(time.Microsecond))
		return nil
	}},
	{"fleet", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg := scale.DefaultFleetConfig()
		cfg.Binary = exe
		if o.quick {
			cfg.Processes, cfg.Sessions, cfg.Locks, cfg.Names = 5, []int{1, 4}, 40, 100
		}
		r, err := scale.Fleet(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Fleet = r
		rep.Summary.FleetRan, rep.Summary.Fleet = true, &r
		rep.failed("fleet", r.Failures)
		fmt.Fprint(progress, r.Table())
		return nil
	}},
	{"shards", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		cfg := scale.DefaultShardsConfig()
		if o.quick {
			cfg.Members, cfg.Shards, cfg.RestShards, cfg.Rest, cfg.Settle = 5, 256, 32, 3*time.Second, time.Second
		}
		if o.shardMembers > 0 {
			cfg.Members = o.shardMembers
		}
		if o.shardCount > 0 {
			cfg.Shards = o.shardCount
		}
		r, err := scale.Shards(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Shards = r
		rep.failed("shards", r.Failures)
		return nil
	}},
	{"cold", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		cfg := scale.DefaultColdConfig()
		if o.quick {
			cfg.Members, cfg.Shards = 5, 256
		}
		if o.shardMembers > 0 {
			cfg.Members = o.shardMembers
		}
		if o.shardCount > 0 {
			cfg.Shards = o.shardCount
		}
		cfg.Profile = o.coldProfile
		r, err := scale.Cold(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Cold = r
		rep.failed("cold", r.Failures)
		return nil
	}},
	{"clusters", func(ctx context.Context, o options, rep *report, progress io.Writer) error {
		cfg := scale.DefaultClustersConfig()
		if o.quick {
			cfg.Counts, cfg.Runs, cfg.Window = []int{1, 2}, 1, time.Second
		}
		r, err := scale.Clusters(ctx, cfg, progress)
		if err != nil {
			return err
		}
		rep.Clusters = r
		rep.failed("clusters", r.Failures)
		fmt.Fprint(progress, r.Table())
		return nil
	}},
}

// failed adds a phase's failures to the summary's, each after the phase's
// name.
func (rep *report) failed(phase string, failures []string) {
	for _, f := range failures {
		rep.Summary.Failures = append(rep.Summary.Failures, phase+": "+f)
	}
}
