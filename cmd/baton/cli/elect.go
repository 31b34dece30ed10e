package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
)

type electOptions struct {
	ttl   time.Duration
	once  bool
	grace time.Duration
}

func newElectCmd(g *globals) *cobra.Command {
	var o electOptions
	cmd := &cobra.Command{
		Use:   "elect NAME VALUE [-- CMD ARGS...]",
		Short: "Campaign as VALUE; lead until interrupted, or run a command while leader",
		Long: `Campaign in election NAME with VALUE. Once leader, without a command, lead
until SIGINT or SIGTERM; with one, run it with BATON_LOCK_NAME (the election),
BATON_LOCK_KEY, BATON_FENCING_TOKEN and BATON_ELECTION_VALUE in its
environment, forwarding SIGINT and SIGTERM to it.

If leadership may be lost, the command gets SIGTERM, then SIGKILL after
--grace, and baton campaigns again (with --once it exits with 79 instead).
On SIGINT or SIGTERM baton resigns, so the next candidate leads at once.
When the command exits by itself baton resigns and exits with its status.`,
		Args: args(2, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			argv, err := splitCommand(cmd, a, 2)
			if err != nil {
				return err
			}
			if o.grace <= 0 {
				return usageErrorf("--grace must be positive")
			}
			return runElect(cmd, g, o, a[0], a[1], argv)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.ttl, "ttl", election.DefaultTTL, "lease TTL: whole seconds, at least 2s")
	f.BoolVar(&o.once, "once", false, "exit with 79 when leadership is lost instead of campaigning again")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	return cmd
}

func runElect(cmd *cobra.Command, g *globals, o electOptions, name, value string, argv []string) error {
	// Without a command a signal ends ictx; with one, signals arrive on
	// sigs, to be forwarded to the command, registered for the whole run
	// so that none falls between campaigning and running it.
	ictx := cmd.Context()
	var sigs chan os.Signal
	if len(argv) == 0 {
		var stop context.CancelFunc
		ictx, stop = signal.NotifyContext(ictx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
	} else {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	cli, err := g.client(ictx)
	if err != nil {
		return err
	}
	defer cli.Close()
	e, err := election.New(cli, name, election.WithTTL(o.ttl), election.WithNamespace(g.namespace))
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer e.Close()
	errOut := cmd.ErrOrStderr()

	for {
		fmt.Fprintf(errOut, "baton: campaigning in election %q as %q\n", name, value)
		t, err := campaign(ictx, e, value, sigs)
		if err != nil {
			if ictx.Err() != nil || errors.Is(err, errInterrupted) {
				return nil // interrupted before leading: nothing to resign
			}
			return g.failed(fmt.Sprintf("campaign in election %q", name), err)
		}
		recordHeld(ictx, t.Txn, heldPut(g.namespace, keys.Election, name, t.Lease(), t.Acquired()))
		v := heldView{Kind: string(keys.Election), Name: name, Value: value, Key: t.Key(), Token: int64(t.Token()),
			Lease: leaseHex(int64(t.Lease())), TTL: t.TTL()}
		if err := writeHeld(cmd.OutOrStdout(), g.json(), v); err != nil {
			resign(cmd, t)
			return err
		}
		var res childResult
		if len(argv) == 0 {
			select {
			case <-t.Done():
			case <-ictx.Done():
			}
		} else {
			c := child{
				argv: argv, grace: o.grace,
				env: []string{
					"BATON_LOCK_NAME=" + name,
					"BATON_LOCK_KEY=" + t.Key(),
					"BATON_FENCING_TOKEN=" + t.Token().String(),
					"BATON_ELECTION_VALUE=" + value,
				},
				stdin: cmd.InOrStdin(), stdout: cmd.OutOrStdout(), stderr: errOut,
			}
			if res, err = c.run(ictx, t.Done(), sigs); err != nil {
				resign(cmd, t)
				return err
			}
		}
		lost := lostError(t.Context(), "leadership of election", name)
		resign(cmd, t)
		if lost == nil {
			if len(argv) == 0 {
				fmt.Fprintf(errOut, "baton: resigned from election %q\n", name)
				return nil
			}
			return childStatus(res.status)
		}
		if len(argv) > 0 {
			lost = withCode(ExitOwnershipLost, fmt.Errorf("%v; %s", lost, stoppedText(res, o.grace)))
		}
		if o.once || ictx.Err() != nil {
			return lost
		}
		fmt.Fprintf(errOut, "baton: %v\n", lost)
	}
}

// campaign waits for leadership; a signal ends the wait (the channel is
// nil when signals end ictx instead).
func campaign(ictx context.Context, e *election.Election, value string, sigs <-chan os.Signal) (*election.Term, error) {
	if sigs == nil {
		return e.Campaign(ictx, value)
	}
	cctx, cancel := context.WithCancel(ictx)
	defer cancel()
	type result struct {
		t   *election.Term
		err error
	}
	done := make(chan result, 1)
	go func() {
		t, err := e.Campaign(cctx, value)
		done <- result{t, err}
	}()
	select {
	case r := <-done:
		return r.t, r.err
	case <-sigs:
		cancel()
		r := <-done
		if r.err == nil {
			resignQuietly(r.t)
		}
		return nil, errInterrupted
	}
}

var errInterrupted = errors.New("interrupted")

func resign(cmd *cobra.Command, t *election.Term) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
	defer cancel()
	if err := t.Resign(rctx); err != nil && !errors.Is(err, election.ErrNotLeader) {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: resign: %v (the lease expires within its TTL)\n", err)
	}
}

func resignQuietly(t *election.Term) {
	rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = t.Resign(rctx)
}
