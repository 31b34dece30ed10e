package dev

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd"
)

type demoOptions struct {
	workers  int
	ttl      time.Duration
	interval time.Duration
	writes   int
	timeout  time.Duration
}

func NewCmdDemo(g *cmdutil.Env) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a paused leader, a failover, and fencing rejecting the zombie's write",
		Long: `Start an embedded etcd, a ledger that admits writes only through a fencing
guard, and worker processes (this binary) that campaign for one election and,
while leading, write numbered records with their fencing token. Freeze the
leader with SIGSTOP past its lease TTL, watch another take over with a higher
token, resume the frozen one with SIGCONT and watch its late write be rejected
as stale. Print the timeline and a summary, check the invariants, and exit
non-zero if one breaks. Needs nothing but this binary; takes a few seconds.`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.workers < 2 || o.workers > 9:
				return cmdutil.UsageErrorf("--workers %d: between 2 and 9", o.workers)
			case o.writes < 1:
				return cmdutil.UsageErrorf("--writes %d: at least 1", o.writes)
			case o.interval <= 0 || o.timeout <= 0:
				return cmdutil.UsageErrorf("--interval and --timeout must be positive")
			}
			return runDemo(cmd, g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.workers, "workers", 3, "worker processes")
	f.DurationVar(&o.ttl, "ttl", 2*time.Second, "lease TTL of each worker")
	f.DurationVar(&o.interval, "interval", 150*time.Millisecond, "a leader's pause before each write")
	f.IntVar(&o.writes, "writes", 3, "records each leader writes before the next step")
	f.DurationVar(&o.timeout, "timeout", 25*time.Second, "give up (and fail) after this long")
	return cmd
}

// demoEvent is anything the demo hears, in the order it hears it.
type demoEvent struct {
	at     time.Time
	worker string       // a worker's event or exit
	ev     *workerEvent // nil with worker set: the worker exited
	ledger *ledgerEntry
	etcd   *election.Leader
}

type demoWorker struct {
	id    string
	cmd   *exec.Cmd
	stdin io.Closer
}

const demoElection = "demo"

func runDemo(cmd *cobra.Command, g *cmdutil.Env, o demoOptions) error {
	out := cmd.OutOrStdout()
	sctx, stopSignals := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(sctx, o.timeout)
	defer cancel()

	r := &demoReport{TTL: o.ttl, Start: time.Now()}
	note := func(who, format string, a ...any) {
		r.Timeline = append(r.Timeline, timelineEntry{At: time.Now(), Who: who, What: fmt.Sprintf(format, a...)})
	}
	fmt.Fprintf(out, "baton demo: %d workers campaign for election %q with %v leases. The leader writes\n"+
		"numbered records to a ledger that admits a token only if it is >= the highest it has seen.\n"+
		"The leader will be frozen (SIGSTOP) past its lease, then resumed (SIGCONT).\n\n", o.workers, demoElection, o.ttl)

	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	defer srv.Stop()
	note("etcd", "embedded etcd serving at %s", srv.Endpoint())

	events := make(chan demoEvent, 4096)
	var producers sync.WaitGroup

	lg := newLedger(func(e ledgerEntry) { events <- demoEvent{at: e.At, ledger: &e} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	hs := &http.Server{Handler: lg, ReadHeaderTimeout: 5 * time.Second}
	servDone := make(chan struct{})
	go func() {
		defer close(servDone)
		_ = hs.Serve(ln)
	}()
	ledgerURL := "http://" + ln.Addr().String()
	note("ledger", "serving at %s, guarded by a fencing.MemoryGuard", ledgerURL)

	// An observer of its own, to show leadership as etcd decides it.
	ocli, err := srv.NewClient()
	if err != nil {
		return err
	}
	defer ocli.Close()
	oe, err := election.New(ocli, demoElection, election.WithNamespace(g.Namespace))
	if err != nil {
		return err
	}
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	producers.Add(1)
	go func() {
		defer producers.Done()
		for l := range oe.Observe(octx) {
			events <- demoEvent{at: time.Now(), etcd: &l}
		}
	}()

	exe := g.IO.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			ocancel()
			return fmt.Errorf("find this binary to start workers: %w", err)
		}
	}
	workers := map[string]*demoWorker{}
	var order []string
	for i := 1; i <= o.workers; i++ {
		id := fmt.Sprintf("w%d", i)
		w, err := startWorker(exe, g, o, id, srv.Endpoint(), ledgerURL, cmd.ErrOrStderr(), events, &producers)
		if err != nil {
			for _, w := range workers {
				_ = w.cmd.Process.Kill()
			}
			ocancel()
			return err
		}
		workers[id] = w
		order = append(order, id)
		note(id, "started (pid %d)", w.cmd.Process.Pid)
	}

	// Close the event stream once every producer is done.
	allDone := make(chan struct{})
	shutdown := sync.OnceFunc(func() {
		for _, id := range order {
			w := workers[id]
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			_ = w.stdin.Close()
		}
		go func() {
			// A worker that does not stop in time is killed.
			t := time.NewTimer(5 * time.Second)
			defer t.Stop()
			select {
			case <-allDone:
			case <-t.C:
				for _, w := range workers {
					_ = w.cmd.Process.Kill()
				}
			}
		}()
	})
	// Wake the loop below when time runs out, even if nothing happens.
	producers.Add(1)
	go func() {
		defer producers.Done()
		select {
		case <-ctx.Done():
			events <- demoEvent{at: time.Now()}
		case <-octx.Done():
		}
	}()
	go func() {
		producers.Wait()
		close(events)
	}()
	defer func() {
		shutdown()
		for range events {
		}
	}()

	sc := newScenario(o, workers, r, note)
	finished := false
	for ev := range events {
		sc.handle(ev)
		if !finished && (sc.done() || ctx.Err() != nil) {
			finished = true
			if !sc.done() {
				r.Problems = append(r.Problems, sc.stalled(sctx.Err() != nil))
			}
			note("demo", "stopping the workers (SIGTERM)")
			shutdown()
			ocancel()
		}
	}
	close(allDone)
	for _, w := range workers {
		_ = w.cmd.Wait()
	}
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	_ = hs.Shutdown(hctx)
	hcancel()
	<-servDone
	_ = oe.Close()
	r.End = time.Now()
	r.Timeline = append(r.Timeline, ledgerTimeline(r.Ledger)...)
	sortTimeline(r.Timeline)
	if len(r.Leaders) > 0 && r.Leaders[len(r.Leaders)-1].To.IsZero() {
		r.Leaders[len(r.Leaders)-1].To = r.End
	}
	r.write(out)
	if !passed(r.checks()) {
		return errors.New("demo failed: an invariant broke or the scenario did not play out")
	}
	return nil
}

func sortTimeline(tl []timelineEntry) {
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].At.Before(tl[j].At) })
}

func startWorker(exe string, g *cmdutil.Env, o demoOptions, id, endpoint, ledgerURL string, stderr io.Writer,
	events chan<- demoEvent, producers *sync.WaitGroup) (*demoWorker, error) {
	c := exec.Command(exe, "demo-worker", "--endpoints", endpoint, "--namespace", g.Namespace,
		"--id", id, "--election", demoElection, "--ledger", ledgerURL,
		"--ttl", o.ttl.String(), "--interval", o.interval.String())
	c.Stderr = stderr
	stdin, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	producers.Add(1)
	go func() {
		defer producers.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev workerEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			events <- demoEvent{at: time.Now(), worker: id, ev: &ev}
		}
		events <- demoEvent{at: time.Now(), worker: id}
	}()
	return &demoWorker{id: id, cmd: c, stdin: stdin}, nil
}
