package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// examples are shown in each command's --help, by command path; a command
// may also set its own Example.
var examples = map[string]string{
	"baton leader":     `  baton leader scheduler` + "\n" + `  baton leader scheduler -o json --namespace payments`,
	"baton candidates": `  baton candidates scheduler`,
	"baton observe":    `  baton observe scheduler` + "\n" + `  baton observe scheduler -o json | jq .value`,
	"baton locks":      `  baton locks` + "\n" + `  baton locks jobs/ -o json`,
	"baton lock": `  baton lock nightly-report -- ./report.sh
  baton lock migrations --try -- ./migrate.sh      # exit 75 if held
  baton lock deploy --timeout 30s --ttl 30s -- make deploy`,
	"baton elect": `  baton elect scheduler "$(hostname)" -- ./scheduler
  baton elect scheduler host-a --once`,
	"baton dev": `  baton dev
  baton dev --data-dir ./etcd-data
  baton dev --tls ./pki --auth --policy policy.yaml`,
	"baton demo":            `  baton demo`,
	"baton certs init":      `  baton certs init --dir ./pki --users root,payments-api,oncall`,
	"baton rbac apply":      `  baton rbac apply -f policy.yaml --dry-run` + "\n" + `  baton rbac apply -f policy.yaml`,
	"baton rbac show":       `  baton rbac show > policy.yaml`,
	"baton auth enable":     `  baton auth enable` + "\n" + `  printf '%s\n' "$ROOT_PW" | baton auth enable --root-password-stdin`,
	"baton completion bash": `  source <(baton completion bash)`,
}

// finishCommands adds what every command gets: its examples, and, for a
// command that only groups others, an error (exit 64) for an unknown
// subcommand instead of help and success.
func finishCommands(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[c.CommandPath()]
		}
		if c.HasSubCommands() && c != root && c.Run == nil && c.RunE == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, a []string) error {
				var names []string
				for _, s := range cmd.Commands() {
					if s.IsAvailableCommand() {
						names = append(names, s.Name())
					}
				}
				if len(a) == 0 {
					return cmdutil.UsageErrorf("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
				}
				return cmdutil.UsageErrorf("unknown command %s for %s; its subcommands: %s", cmdutil.SafeQ(a[0]), cmd.CommandPath(), strings.Join(names, ", "))
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}
