package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/rbac"
)

func newRBACCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rbac",
		Short: "Apply and show the namespace access policy (etcd roles)",
	}
	cmd.AddCommand(newRBACApplyCmd(g), newRBACShowCmd(g))
	return cmd
}

// applyReport is the outcome of rbac apply, for -o json.
type applyReport struct {
	DryRun  bool          `json:"dry_run"`
	Changes []rbac.Change `json:"changes"`
}

func newRBACApplyCmd(g *globals) *cobra.Command {
	var (
		file         string
		dryRun, prun bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f POLICY [--dry-run] [--prune]",
		Short: "Make etcd's roles and users match a policy file",
		Long: `Read a policy (YAML or JSON; unknown fields are errors) and make etcd's auth
state match it: roles baton:NS:readwrite for contenders and baton:NS:read for
observers, each holding one permission on the namespace's prefix; missing users
created without a password (they authenticate by client certificate); roles
granted, and revoked from users the policy no longer lists. Namespaces not in
the file are left alone unless --prune. Prints each change; a second run prints
none. Needs root when auth is enabled.`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("-f is required")
			}
			p, err := rbac.LoadFile(file)
			if err != nil {
				if errors.Is(err, rbac.ErrInvalidPolicy) {
					return withCode(ExitUsage, err)
				}
				return err
			}
			if g.routed() {
				return g.rbacApplyAcross(cmd, p, dryRun, prun)
			}
			ctx := cmd.Context()
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			var opts []rbac.ApplyOption
			if dryRun {
				opts = append(opts, rbac.WithDryRun())
			}
			if prun {
				opts = append(opts, rbac.WithPrune())
			}
			// Bounded as a whole: Apply makes one request per change.
			actx, cancel := g.opContext(ctx)
			defer cancel()
			changes, err := rbac.Apply(actx, cli, p, opts...)
			out := cmd.OutOrStdout()
			if g.json() {
				if changes == nil {
					changes = []rbac.Change{}
				}
				if werr := writeJSON(out, applyReport{DryRun: dryRun, Changes: changes}); werr != nil {
					return werr
				}
			} else {
				verb := ""
				if dryRun {
					verb = "would "
				}
				for _, c := range changes {
					fmt.Fprintf(out, "%s%s\n", verb, c)
				}
				if err == nil && len(changes) == 0 {
					fmt.Fprintln(out, "no changes")
				}
			}
			if err != nil {
				return g.failed("rbac apply", err)
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

func newRBACShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print the policy in force, as a file rbac apply accepts",
		Args:  args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			sctx, cancel := g.opContext(ctx)
			defer cancel()
			p, err := rbac.Show(sctx, cli)
			if err != nil {
				return g.failed("rbac show", err)
			}
			out := cmd.OutOrStdout()
			if g.json() {
				if p.Namespaces == nil {
					p.Namespaces = []rbac.Namespace{}
				}
				return writeJSON(out, p)
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
