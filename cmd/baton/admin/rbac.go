package admin

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/rbac"
)

func NewCmdRBAC(g *cmdutil.Env) *cobra.Command {
	return cmdutil.Group("rbac", "Apply and show the namespace access policy (etcd roles)", newRBACApplyCmd(g), newRBACShowCmd(g))
}

// applyReport is the outcome of rbac apply, for -o json.
type applyReport struct {
	DryRun      bool          `json:"dry_run"`
	AuthEnabled bool          `json:"auth_enabled"`
	Changes     []rbac.Change `json:"changes"`
}

func newRBACApplyCmd(g *cmdutil.Env) *cobra.Command {
	var (
		file         string
		dryRun, prun bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f POLICY [--dry-run] [--prune]",
		Short: "Make etcd's roles and users match a policy file",
		Long: `Read a policy (YAML or JSON; unknown fields are errors) and make etcd's auth
state match it: roles baton:NS:readwrite for contenders, baton:NS:request for
requesters (contenders who may also ask a holder to let go, and write the
request records under /NS/audit/v1/request/), baton:NS:read for observers and
baton:NS:operate for operators (who may force-unlock and write the audit trail
under /NS/audit/v1/, which contenders can only read); missing users
created without a password (they authenticate by client certificate); roles
granted, and revoked from users the policy no longer lists. Namespaces not in
the file are left alone unless --prune. Prints each change; a second run prints
none. Needs root when auth is enabled; warns when auth is disabled, since the
roles are then not enforced. --command-timeout bounds each request, not the
whole apply, and each change is printed as soon as etcd accepted it.`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return cmdutil.UsageErrorf("-f is required")
			}
			p, err := rbac.LoadFile(file)
			if err != nil {
				if errors.Is(err, rbac.ErrInvalidPolicy) {
					return cmdutil.WithCode(cmdutil.ExitUsage, err)
				}
				return err
			}
			if g.Routed() {
				return rbacApplyAcross(g, cmd, p, dryRun, prun)
			}
			ctx := cmd.Context()
			cli, err := g.Client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			out := cmd.OutOrStdout()
			authOn := warnIfAuthOff(cmd, g, cli)
			// Each request bounded: an apply of thousands of changes may take
			// longer than --command-timeout as a whole.
			opts := []rbac.ApplyOption{rbac.WithRequestTimeout(g.CommandTimeout)}
			if dryRun {
				opts = append(opts, rbac.WithDryRun())
			}
			if prun {
				opts = append(opts, rbac.WithPrune())
			}
			streamed := !g.JSON() && !dryRun
			if streamed {
				opts = append(opts, rbac.WithProgress(func(c rbac.Change) { fmt.Fprintln(out, c) }))
			}
			changes, err := rbac.Apply(ctx, cli, p, opts...)
			if g.JSON() {
				if changes == nil {
					changes = []rbac.Change{}
				}
				if werr := cmdutil.WriteJSON(out, applyReport{DryRun: dryRun, AuthEnabled: authOn, Changes: changes}); werr != nil {
					return werr
				}
			} else {
				if !streamed {
					for _, c := range changes {
						fmt.Fprintf(out, "would %s\n", c)
					}
				}
				if err == nil && len(changes) == 0 {
					fmt.Fprintln(out, "no changes")
				}
			}
			if err != nil {
				return g.Failed("rbac apply", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "policy file, YAML or JSON")
	f.BoolVar(&dryRun, "dry-run", false, "print the changes without making them")
	f.BoolVar(&prun, "prune", false, "also delete baton's roles of namespaces the file does not list")
	return cmd
}

func newRBACShowCmd(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print the policy in force, as a file rbac apply accepts",
		Long: `Print the policy in force, as a file rbac apply accepts. Needs root when auth
is enabled; warns when auth is disabled, since the roles are then not enforced.
With --clusters (and no --namespace), every cluster is read and the result is
one file that rbac apply --clusters accepts: each namespace as the cluster that
serves it has it; a cluster that does not answer is named on stderr (exit 3).`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.FanOut(cmd) {
				return rbacShowAcross(g, cmd)
			}
			ctx := cmd.Context()
			cli, err := g.Client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			warnIfAuthOff(cmd, g, cli)
			p, err := rbac.Show(ctx, cli, rbac.WithRequestTimeout(g.CommandTimeout))
			if err != nil {
				return g.Failed("rbac show", err)
			}
			out := cmd.OutOrStdout()
			if g.JSON() {
				if p.Namespaces == nil {
					p.Namespaces = []rbac.Namespace{}
				}
				return cmdutil.WriteJSON(out, p)
			}
			data, err := rbac.Encode(p)
			if err != nil {
				return err
			}
			_, err = out.Write(data)
			return err
		},
	}
}

// warnIfAuthOff tells on stderr that the roles are not enforced when
// etcd's auth is off, and reports whether it is on (true when unknown).
func warnIfAuthOff(cmd *cobra.Command, g *cmdutil.Env, cli *clientv3.Client) bool {
	ctx, cancel := g.OpContext(cmd.Context())
	defer cancel()
	on, err := rbac.AuthEnabled(ctx, cli)
	switch {
	case err != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not tell whether auth is enabled: %v\n", err)
		return true
	case !on:
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: auth is disabled on this etcd: these roles are not enforced until `baton auth enable`")
	}
	return on
}
