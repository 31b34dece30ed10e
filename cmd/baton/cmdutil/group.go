package cmdutil

import "github.com/spf13/cobra"

// Group is a command that only groups its subcommands (baton auth, certs,
// clusters, rbac): run alone, it prints its help.
func Group(use, short string, subcommands ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	cmd.AddCommand(subcommands...)
	return cmd
}
