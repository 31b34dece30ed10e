package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/admin"
	"github.com/batonhq/baton/cmd/baton/clusters"
	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/dev"
	"github.com/batonhq/baton/cmd/baton/hold"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/operate"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/cmd/baton/version"
)

// commands is the one list of subcommands. A command is added by one file
// with its constructor and one line here.
func commands(g *cmdutil.Env) []*cobra.Command {
	return []*cobra.Command{
		inspect.NewCmdLeader(g),
		inspect.NewCmdCandidates(g),
		inspect.NewCmdObserve(g),
		inspect.NewCmdLocks(g),
		inspect.NewCmdShards(g),
		hold.NewCmdLock(g),
		hold.NewCmdElect(g),
		hold.NewCmdShard(g),
		operate.NewCmdUnlock(g),
		operate.NewCmdResign(g),
		inspect.NewCmdAudit(g),
		dev.NewCmdDev(g),
		dev.NewCmdDemo(g),
		ui.NewCmdUI(g),
		serve.NewCmdServe(g),
		dev.NewCmdDemoWorker(g),
		supervise.NewCmdSupervise(g),
		admin.NewCmdCerts(g), admin.NewCmdRBAC(g), admin.NewCmdAuth(g),
		clusters.NewCmdClusters(g), version.NewCmdVersion(g),
	}
}

// NewRoot returns the baton command with every subcommand.
func NewRoot(io cmdutil.IO) *cobra.Command {
	root, _ := newRoot(io)
	return root
}

func newRoot(io cmdutil.IO) (*cobra.Command, *cmdutil.Env) {
	g := cmdutil.NewEnv(io)
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
		Version:       version.Text(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, a []string) error {
			g.Ran = true
			if err := version.Skew(); err != nil {
				return cmdutil.WithCode(cmdutil.ExitUsage, err)
			}
			if err := g.Validate(); err != nil {
				return err
			}
			return cmdutil.ValidateArgs(cmd, a)
		},
	}
	root.SetVersionTemplate(version.Template)
	root.SetIn(io.In)
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	g.Register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdutil.WithCode(cmdutil.ExitUsage, err) })
	for _, c := range commands(g) {
		root.AddCommand(c)
	}
	finishCommands(root)
	return root, g
}

// Main runs baton with args and returns the process exit code. Errors are
// printed on io.Err.
func Main(ctx context.Context, args []string, io cmdutil.IO) int {
	root, g := newRoot(io)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return cmdutil.ExitOK
	}
	code := cmdutil.ExitCode(err)
	var ee *cmdutil.CodedError
	if !errors.As(err, &ee) && !g.Ran {
		code = cmdutil.ExitUsage // cobra's own errors: unknown command, bad arguments
	}
	if !errors.As(err, &ee) || !ee.Silent {
		fmt.Fprintf(io.Err, "baton: %s\n", cmdutil.SafeMessage(err.Error()))
		if code == cmdutil.ExitUsage && cmd != nil {
			fmt.Fprintf(io.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}
