package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// IO is what the commands read and write, and the environment they see.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Getenv reads an environment variable (BATON_ENDPOINTS,
	// BATON_PASSWORD); nil reads none.
	Getenv func(string) string
	// Executable is the path of the baton binary, which the demo starts
	// again as its workers; empty means os.Executable.
	Executable string
	// Now is the clock for displayed times; nil means time.Now.
	Now func() time.Time
}

// StdIO is the process's standard streams and environment.
func StdIO() IO {
	return IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv}
}

// commands is the one list of subcommands. A command is added by one file
// with its constructor and one line here.
func commands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		newLeaderCmd(g),
		newCandidatesCmd(g),
		newObserveCmd(g),
		newLocksCmd(g),
		newLockCmd(g),
		newElectCmd(g),
		newUnlockCmd(g),
		newResignCmd(g),
		newAuditCmd(g),
		newDevCmd(g),
		newDemoCmd(g),
		newUICmd(g),
		newDemoWorkerCmd(g),
		newSuperviseCmd(g),
		newCertsCmd(g), newRBACCmd(g), newAuthCmd(g),
		newClustersCmd(g), newVersionCmd(g),
	}
}

// NewRoot returns the baton command with every subcommand.
func NewRoot(io IO) *cobra.Command {
	root, _ := newRoot(io)
	return root
}

func newRoot(io IO) (*cobra.Command, *globals) {
	g := newGlobals(io)
	root := &cobra.Command{
		Use:   "baton",
		Short: "Inspect and operate baton locks and elections on etcd",
		Long: `baton shows who leads and who waits, streams leadership changes, runs a
command under a lock or as leader (with its fencing token in the
environment), force-unlocks only after checking the holder is dead, serves
an embedded etcd for local use, and demonstrates fencing (baton demo).

Exit codes: 0 ok, 1 error, 3 some clusters (--clusters) or endpoints (version) did not answer,
64 usage, 69 etcd unreachable, 75 lock not acquired, 77 force-unlock
refused (holder alive), 78 refused by etcd (TLS, authentication,
permission), 79 ownership lost; lock and elect pass their command's own
status through.

Every global flag may also be set by a variable: --dial-timeout by
BATON_DIAL_TIMEOUT, and so on; a flag on the command line wins.`,
		Version:       versionText(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, a []string) error {
			g.ran = true
			if err := g.validate(); err != nil {
				return err
			}
			return validateArgs(cmd, a)
		},
	}
	root.SetVersionTemplate(versionTemplate)
	root.SetIn(io.In)
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	g.register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(ExitUsage, err) })
	for _, c := range commands(g) {
		root.AddCommand(c)
	}
	finishCommands(root)
	return root, g
}

// Main runs baton with args and returns the process exit code. Errors are
// printed on io.Err.
func Main(ctx context.Context, args []string, io IO) int {
	root, g := newRoot(io)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var ee *exitError
	if !errors.As(err, &ee) && !g.ran {
		code = ExitUsage // cobra's own errors: unknown command, bad arguments
	}
	if !errors.As(err, &ee) || !ee.silent {
		fmt.Fprintf(io.Err, "baton: %s\n", safeMessage(err.Error()))
		if code == ExitUsage && cmd != nil {
			fmt.Fprintf(io.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}

// args checks the number of positional arguments, as a usage error.
func args(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) < min || max >= 0 && len(a) > max {
			switch {
			case min == max:
				return usageErrorf("%s takes %d argument(s), got %d", cmd.Name(), min, len(a))
			case max < 0:
				return usageErrorf("%s takes at least %d argument(s), got %d", cmd.Name(), min, len(a))
			default:
				return usageErrorf("%s takes %d to %d arguments, got %d", cmd.Name(), min, max, len(a))
			}
		}
		return nil
	}
}
