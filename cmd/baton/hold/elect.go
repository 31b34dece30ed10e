package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/internal/telemetry"
)

type electOptions struct {
	ttl     time.Duration
	once    bool
	grace   time.Duration
	metrics string
	delay   time.Duration
	signal  string         // --release-signal (lock_request.go)
	reqSig  syscall.Signal // its value

	// The candidate's attributes and the election's strategy.
	priority int
	version  string
	strategy string
	deadline time.Duration
}

// candidateOptions checks --priority, --version, --strategy and
// --handover-deadline before any connection, with the library's bounds,
// and returns them as the election's options.
func (o electOptions) candidateOptions(f *pflag.FlagSet) ([]election.Option, error) {
	var opts []election.Option
	switch o.strategy {
	case "oldest":
	case "preferred":
		opts = append(opts, election.WithStrategy(election.Preferred))
	default:
		return nil, cmdutil.UsageErrorf("--strategy %s: must be oldest or preferred", cmdutil.SafeQ(o.strategy))
	}
	if f.Changed("priority") {
		opts = append(opts, election.WithPriority(o.priority))
	}
	if f.Changed("version") {
		if err := config.ValidateVersion(o.version); err != nil {
			return nil, cmdutil.UsageErrorf("--version %s: %v", cmdutil.SafeQ(o.version), err)
		}
		opts = append(opts, election.WithVersion(o.version))
	}
	if f.Changed("handover-deadline") {
		if o.deadline < config.MinDeadline || o.deadline > config.MaxDeadline {
			return nil, cmdutil.UsageErrorf("--handover-deadline %v: must be at least %v and at most %v", o.deadline, config.MinDeadline, config.MaxDeadline)
		}
		if o.strategy != "preferred" {
			return nil, cmdutil.UsageErrorf("--handover-deadline is for --strategy preferred: under oldest nobody is asked to end a term")
		}
		opts = append(opts, election.WithHandoverDeadline(o.deadline))
	}
	return opts, nil
}

func NewCmdElect(g *cmdutil.Env) *cobra.Command {
	var o electOptions
	cmd := &cobra.Command{
		Use:   "elect NAME VALUE [-- CMD ARGS...]",
		Short: "Campaign as VALUE; lead until interrupted, or run a command while leader",
		Long: `Campaign in election NAME with VALUE. Once leader, without a command, lead
until SIGINT, SIGTERM or SIGHUP; with one, run it with BATON_LOCK_NAME (the
election), BATON_LOCK_KEY, BATON_FENCING_TOKEN and BATON_ELECTION_VALUE in
its environment. The command is looked up before campaigning: 127 if it is
not found, 126 if it cannot be run.

If leadership may be lost, the command's process group gets SIGTERM, then
SIGKILL after --grace, and baton campaigns again, and runs the command
again on its next term (with --once it exits with 79 instead). Campaigning
goes on through etcd outages. On SIGINT, SIGTERM or SIGHUP baton stops the
command and resigns, so the next candidate leads at once; a signal while
campaigning exits with 128+N. When the command exits by itself baton
resigns and exits with its status. On Linux the command is supervised as
with baton lock: it never outlives a killed or frozen baton.

--priority and --version are what the candidate says about itself: every
observer sees them (baton candidates, baton observe, baton ui), and under
--strategy preferred the best candidate leads (highest priority, then
lowest version, then age), asking a leader it outranks to end its term
and preempting it after --handover-deadline. Asked so (or by baton resign
--to), a baton elect leader passes the request to its command as
--release-signal and hands over once the command exited (without a
command, at once): to the candidate resign --to named, else to the best.
Such a term ends as a loss, as a preempted one does: baton campaigns again
(79 with --once). Every candidate of an election must use the same
strategy.

With OTEL_EXPORTER_OTLP_ENDPOINT set, each term's wait, hold and
resignation are exported as OpenTelemetry spans, and the command gets
TRACEPARENT and TRACESTATE naming the term's hold, as with baton lock.`,
		Args: cmdutil.Args(2, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			argv, err := splitCommand(cmd, a, 2)
			if err != nil {
				return err
			}
			if o.grace <= 0 {
				return cmdutil.UsageErrorf("--grace must be positive")
			}
			if err := validateLockDelay(o.delay); err != nil {
				return err
			}
			if o.reqSig, err = parseSignal(o.signal); err != nil {
				return err
			}
			copts, err := o.candidateOptions(cmd.Flags())
			if err != nil {
				return err
			}
			return runElect(cmd, g, o, a[0], a[1], argv, copts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.ttl, "ttl", election.DefaultTTL, "lease TTL: whole seconds, at least 2s")
	f.BoolVar(&o.once, "once", false, "exit with 79 when leadership is lost instead of campaigning again")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	f.IntVar(&o.priority, "priority", 0, "the candidate's priority: under --strategy preferred a higher one leads")
	f.StringVar(&o.version, "version", "", "the candidate's version (letters, digits, '.', '_', '+', '-'; at most 64 bytes): under preferred the lowest leads among equal priorities")
	f.StringVar(&o.strategy, "strategy", "oldest", "how the election picks its leader: oldest (etcd's, the default) or preferred (every candidate must agree)")
	f.DurationVar(&o.deadline, "handover-deadline", config.DefaultDeadline, "under preferred: how long a leader this candidate outranks has to hand over before it is preempted")
	addLockDelayFlag(f, &o.delay)
	addReleaseSignalFlag(f, &o.signal)
	addMetricsFlag(f, &o.metrics)
	return cmd
}

// runElect campaigns, leads, and campaigns again after a loss, as
// election.Run does, with a command restarted on each term.
func runElect(cmd *cobra.Command, g *cmdutil.Env, o electOptions, name, value string, argv []string, copts []election.Option) (err error) {
	r, err := startHoldRun(cmd, g, argv, o.grace, o.metrics, "baton elect", telemetry.LockName.String(name),
		telemetry.LockNamespace.String(g.Namespace), telemetry.LockPrimitive.String(telemetry.Election))
	if err != nil {
		return err
	}
	defer func() { r.end(err) }()
	c, ms, ictx, cli := r.child, r.ms, r.ictx, r.cli
	e, err := election.New(cli, name, append([]election.Option{election.WithTTL(o.ttl), election.WithNamespace(g.Namespace),
		election.WithRegisterer(ms.registerer()), election.WithTracerProvider(r.tp), election.WithLockDelay(o.delay)}, copts...)...)
	if err != nil {
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	defer closeBounded(e.Close)
	st := newStatusWriter(cmd.ErrOrStderr(), g.JSON(), string(keys.Election), name)

	for {
		// The library's spans of each term are the command span's
		// children (ictx carries it).
		t, err := campaign(ictx, g, cli, e, value, st)
		if err != nil {
			return err
		}
		endTerm := func() { handOver(ictx, cmd, t) }
		untrack := ms.track(t)
		keyspace.RecordHeld(ictx, t.Txn, keyspace.HeldPut(g.Namespace, keys.Election, name, t.Lease(), t.Acquired()))
		st.acquired(HeldView{Kind: string(keys.Election), Name: name, Value: value, Key: t.Key(), Token: int64(t.Token()),
			Lease: cmdutil.LeaseHex(int64(t.Lease())), TTL: t.TTL()})
		var res supervise.ChildResult
		asked := askedToGo(t)
		if c == nil {
			select {
			case <-t.Done():
			case <-ictx.Done():
			case r := <-asked:
				res.Requested = true
				if _, ok := t.EndRequest(); ok {
					st.requested(r, "handing over")
				} else {
					st.requested(r, "resigning")
				}
			}
		} else {
			tok, err := childToken(g, t.Token())
			if err != nil {
				endTerm()
				untrack()
				return err
			}
			c.Env = append([]string{
				"BATON_LOCK_NAME=" + name,
				"BATON_LOCK_KEY=" + t.Key(),
				"BATON_FENCING_TOKEN=" + tok.String(),
				"BATON_ELECTION_VALUE=" + value,
			}, cmdutil.TraceEnv(t.Context())...) // the command's spans are children of the term
			c.Requests, c.ReqSignal = asked, o.reqSig
			c.OnRequest = func(r request.Request) { st.requested(r, fmt.Sprintf("passing %v to the command", o.reqSig)) }
			if ierr := supervise.InterruptedBeforeCommand(ictx, fmt.Sprintf("election %q", name)); ierr != nil {
				endTerm()
				untrack()
				st.released()
				return ierr
			}
			if res, err = c.Run(ictx, t); err != nil {
				endTerm()
				return err
			}
		}
		lost := lostError(t.Context(), "leadership of election", name)
		if lost == nil && res.Cause != "" {
			lost = cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("leadership of election %q: %s", name, lossCause(t.Context(), res)))
		}
		// Asked to end the term (not to let go): hand over, then campaign
		// again as after a preemption (79 with --once).
		if er, ok := t.EndRequest(); ok && res.Requested && lost == nil {
			lost = cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("leadership of election %q: handed over, asked by %s", name, cmdutil.Safe(er.By)))
		}
		endTerm()
		untrack()
		if lost == nil {
			st.released()
			if c == nil {
				return nil
			}
			return cmdutil.ChildStatus(res.Status)
		}
		if c != nil {
			lost = cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("%v; %s", lost, stoppedText(res, o.grace)))
		}
		final := o.once || ictx.Err() != nil
		st.lost(lost, final)
		if final {
			return lost
		}
	}
}

// campaign waits for leadership through etcd outages, saying on stderr
// who leads meanwhile, until ictx ends.
func campaign(ictx context.Context, g *cmdutil.Env, cli *clientv3.Client, e *election.Election, value string, st *statusWriter) (*election.Term, error) {
	wctx, wcancel := context.WithCancel(ictx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchQueue(wctx, cli, e.Prefix(), st, electionQueue(cli, e, value))
	}()
	defer wg.Wait()
	defer wcancel()
	for attempt := 0; ; attempt++ {
		t, err := e.Campaign(ictx, value)
		if err == nil {
			return t, nil
		}
		switch {
		case ictx.Err() != nil:
			if ierr := cmdutil.InterruptedError(ictx, "election %q: not leading", e.Name()); ierr != nil {
				return nil, ierr
			}
			return nil, ictx.Err()
		case !worthWaiting(err):
			return nil, g.Failed(fmt.Sprintf("campaign in election %q", e.Name()), err)
		}
		st.unreachableNow(err)
		cmdutil.Sleep(ictx, cmdutil.WaitBackoff(attempt))
	}
}

// electionQueue reads the leader and the candidates ahead of this one:
// those queued before the newest candidate with this value.
func electionQueue(cli *clientv3.Client, e *election.Election, value string) func(ctx context.Context) (queueState, bool, error) {
	return func(ctx context.Context) (queueState, bool, error) {
		cands, err := e.Candidates(ctx)
		if err != nil || len(cands) == 0 {
			return queueState{}, false, err
		}
		self := len(cands)
		for i := len(cands) - 1; i >= 0; i-- {
			if cands[i].Value == value {
				self = i
				break
			}
		}
		if self == 0 {
			return queueState{}, false, nil // leading, or about to
		}
		l := cands[0]
		return queueState{holder: l.Value, token: int64(l.Token),
			heldFor: keyspace.HeldFor(ctx, cli, e.Namespace(), keys.Election, e.Name(), l.LeaseID), ahead: self - 1}, true, nil
	}
}

// resign resigns t in ctx's trace, even after ctx ended, saying on stderr
// when it fails.
func resign(ctx context.Context, cmd *cobra.Command, t *election.Term) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := t.Resign(rctx); err != nil && !errors.Is(err, election.ErrNotLeader) {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: resign: %v (the lease expires within its TTL)\n", err)
	}
}

// askedToGo sends the first request to end t: a release request, or an
// end request (baton resign --to, or under the preferred strategy a better
// candidate's); it sends nothing once t ended.
func askedToGo(t *election.Term) <-chan request.Request {
	out := make(chan request.Request, 1)
	released := t.ReleaseRequested() // here: Resign stops its watch
	go func() {
		select {
		case r := <-released:
			out <- r
		case <-t.EndRequested():
			er, _ := t.EndRequest()
			reason := "a better candidate asks to lead"
			if er.To != "" {
				reason = "asked to hand over to " + er.To
			}
			if er.Deadline != "" {
				reason += " (deadline " + er.Deadline + ")"
			}
			out <- request.Request{By: er.By, Reason: reason}
		case <-t.Done():
		}
	}()
	return out
}

// handOver ends t: to the candidate an end request named, else by Resign
// (under the preferred strategy, to the best candidate).
func handOver(ctx context.Context, cmd *cobra.Command, t *election.Term) {
	if er, ok := t.EndRequest(); ok && er.To != "" && t.IsLeader() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err := t.Transfer(rctx, er.To)
		cancel()
		if err == nil {
			return
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: hand over to %s: %s; resigning\n", cmdutil.Safe(er.To), cmdutil.Safe(err.Error()))
	}
	resign(ctx, cmd, t)
}

func ResignQuietly(t *election.Term) {
	rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = t.Resign(rctx)
}
