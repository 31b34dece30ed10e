package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/rbac"
)

func NewCmdAuth(g *cmdutil.Env) *cobra.Command {
	return cmdutil.Group("auth", "etcd authentication", newAuthEnableCmd(g))
}

func newAuthEnableCmd(g *cmdutil.Env) *cobra.Command {
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "enable [--root-password-stdin]",
		Short: "Create root if missing and enable auth; safe to run twice",
		Long: `Create the root user if it does not exist, give it the root role, and enable
etcd's authentication. By default root gets no password: only a client
certificate whose CN is root can act as root (etcd must run with
--client-cert-auth). --root-password-stdin reads a password from the first
line of standard input instead. An existing root keeps its password. When auth
is already enabled nothing changes.`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var password string
			if passwordStdin {
				line, err := bufio.NewReader(g.IO.In).ReadString('\n')
				if err != nil && !(errors.Is(err, io.EOF) && line != "") {
					return cmdutil.UsageErrorf("--root-password-stdin: no password on standard input")
				}
				if password = strings.TrimRight(line, "\r\n"); password == "" {
					return cmdutil.UsageErrorf("--root-password-stdin: the password is empty")
				}
			}
			ctx := cmd.Context()
			cli, err := g.Client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			actx, cancel := g.OpContext(ctx)
			defer cancel()
			changes, err := rbac.EnableAuth(actx, cli, password)
			out := cmd.OutOrStdout()
			if g.JSON() {
				if changes == nil {
					changes = []rbac.Change{}
				}
				if werr := cmdutil.WriteJSON(out, struct {
					Changes []rbac.Change `json:"changes"`
				}{changes}); werr != nil {
					return werr
				}
			} else {
				for _, c := range changes {
					fmt.Fprintln(out, c)
				}
				if err == nil && len(changes) == 0 {
					fmt.Fprintln(out, "auth already enabled")
				}
			}
			if err != nil {
				return g.Failed("auth enable", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&passwordStdin, "root-password-stdin", false, "give a new root the password read from standard input")
	return cmd
}
