package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/batonhq/baton/integration/harness"
)

// FleetConfig sizes the fleet phase: the processes phase run for baton
// and for raw etcd concurrency, with Processes processes of each of
// Sessions sessions (Workers Lock calls at once per session), all in one
// namespace, Locks acquisitions per process over Names names: what a
// release costs the member in watch events as the sessions holding in a
// namespace grow.
type FleetConfig struct {
	Binary    string
	Processes int
	Sessions  []int
	Locks     int
	Names     int
	Workers   int
	TTL       time.Duration
	// Deadline bounds each run.
	Deadline time.Duration
}

// DefaultFleetConfig is 50 processes of 1 and of 10 sessions (50 and 500
// sessions in one namespace), one Lock call at once per session, 400
// acquisitions per process over 2,000 names.
func DefaultFleetConfig() FleetConfig {
	return FleetConfig{Binary: harness.Executable(), Processes: 50, Sessions: []int{1, 10}, Locks: 400, Names: 2000, Workers: 1,
		TTL: 10 * time.Second, Deadline: 3 * time.Minute}
}

// FleetResult is every run of the fleet phase.
type FleetResult struct {
	Runs     []ProcessesResult `json:"runs"`
	Failures []string          `json:"failures,omitempty"`
}

// Run returns the run of impl with sessions per process, if any.
func (r FleetResult) Run(impl string, sessions int) (ProcessesResult, bool) {
	for _, p := range r.Runs {
		if p.Impl == impl && p.Sessions == sessions {
			return p, true
		}
	}
	return ProcessesResult{}, false
}

// Fleet runs the fleet phase: for each count of sessions, baton then raw
// (raw first for every other count), each a processes phase of its own on
// a fresh member.
func Fleet(ctx context.Context, cfg FleetConfig, progress io.Writer) (FleetResult, error) {
	var res FleetResult
	if len(cfg.Sessions) == 0 {
		return res, errors.New("fleet: Sessions must name at least one count of sessions per process")
	}
	if progress == nil {
		progress = io.Discard
	}
	for i, s := range cfg.Sessions {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, raw := range order {
			p := ProcessesConfig{Binary: cfg.Binary, Processes: cfg.Processes, Locks: cfg.Locks, Names: cfg.Names,
				Workers: cfg.Workers, Sessions: s, Raw: raw, TTL: cfg.TTL, Deadline: cfg.Deadline}
			r, err := Processes(ctx, p, progress)
			if err != nil {
				return res, fmt.Errorf("fleet: %w", err)
			}
			res.Runs = append(res.Runs, r)
			for _, f := range r.Failures {
				res.Failures = append(res.Failures, fmt.Sprintf("%s, %d×%d sessions: %s", r.Impl, r.Processes, r.Sessions, f))
			}
		}
	}
	return res, nil
}

// Table is the fleet phase's figures, one row per run.
func (r FleetResult) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-6s %9s %12s %14s %12s %10s %10s\n", "impl", "sessions", "acq/s", "events/acq", "msgs/acq", "unary/acq", "p99")
	for _, p := range r.Runs {
		fmt.Fprintf(&b, "  %-6s %9d %12.0f %14.2f %12.2f %10.2f %10v\n", p.Impl, p.Processes*p.Sessions, p.PerSecond,
			p.EventsPerAcquisition, p.WatchMessagesPerAcquisition, p.UnaryPerAcquisition, p.P99.Round(time.Microsecond))
	}
	return b.String()
}
