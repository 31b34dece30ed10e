package admin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/rbac"
)

func NewCmdCerts(g *cmdutil.Env) *cobra.Command {
	return cmdutil.Group("certs", "Development certificates for TLS with client-certificate auth", newCertsInitCmd(g))
}

// CertsReport is what certs init wrote, for -o json.
type CertsReport struct {
	CA        string                   `json:"ca"`
	CACreated bool                     `json:"ca_created"`
	Server    rbac.TLSFiles            `json:"server"`
	Hosts     []string                 `json:"hosts"`
	Clients   map[string]rbac.TLSFiles `json:"clients"`
}

func newCertsInitCmd(g *cmdutil.Env) *cobra.Command {
	var (
		dir      string
		hosts    []string
		users    []string
		keyType  string
		validity = rbac.DefaultValidity
		force    bool
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR [--hosts localhost,127.0.0.1] [--users root,...]",
		Short: "Write a development CA, a server certificate and client certificates",
		Long: `Write into DIR a development CA (ca.crt, ca.key), a server certificate for
the given hosts and IP addresses (server.crt, server.key), and one client
certificate per user (client-USER.crt, client-USER.key) whose CN is the etcd
user, as etcd's --client-cert-auth reads it. Keys are written with mode 0600.
Run again, it keeps the CA and reissues the other certificates, and says so.
Every argument is checked before anything is written. A directory that group or
others can write is refused (anyone who can write there can replace the CA)
unless --force.

For development and tests only: on a real cluster, certificates come from
your own PKI (see docs/security.md).`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return cmdutil.UsageErrorf("--dir is required")
			}
			opts := rbac.CertOptions{KeyType: rbac.KeyType(keyType), Validity: validity}
			// Everything checked before the first file is written.
			var bad []error
			for _, u := range users {
				if err := rbac.ValidateUser(u); err != nil {
					bad = append(bad, fmt.Errorf("--users: %w", err))
				}
			}
			if err := rbac.ValidateHosts(hosts); err != nil {
				bad = append(bad, fmt.Errorf("--hosts: %w", err))
			}
			if err := opts.Validate(); err != nil {
				bad = append(bad, err)
			}
			if len(bad) > 0 {
				return cmdutil.WithCode(cmdutil.ExitUsage, errors.Join(bad...))
			}
			if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o022 != 0 && !force {
				return cmdutil.UsageErrorf("--dir %q has mode %v: group or others can write it; chmod go-w it, or pass --force", dir, st.Mode().Perm())
			}
			_, statErr := os.Stat(filepath.Join(dir, rbac.CACertFile))
			ca, err := rbac.OpenDevCA(dir, opts)
			if err != nil {
				return CertsError(err)
			}
			rep := CertsReport{CA: ca.CertFile(), CACreated: errors.Is(statErr, os.ErrNotExist), Hosts: hosts, Clients: map[string]rbac.TLSFiles{}}
			if !rep.CACreated {
				fmt.Fprintf(cmd.ErrOrStderr(), "reusing the existing CA %q\n", rep.CA)
			}
			if rep.Server, err = ca.IssueServer(hosts, opts); err != nil {
				return CertsError(err)
			}
			for _, u := range users {
				files, err := ca.IssueClient(u, opts)
				if err != nil {
					return CertsError(err)
				}
				rep.Clients[u] = files
			}
			out := cmd.OutOrStdout()
			if g.JSON() {
				return cmdutil.WriteJSON(out, rep)
			}
			state := "reused"
			if rep.CACreated {
				state = "created"
			}
			fmt.Fprintf(out, "CA      %s (%s)\n", rep.CA, state)
			fmt.Fprintf(out, "server  %s for %v\n", rep.Server.Cert, hosts)
			for _, u := range users {
				fmt.Fprintf(out, "client  %s (CN %s)\n", rep.Clients[u].Cert, u)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA and certificates (created with mode 0700)")
	f.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1"}, "DNS names and IP addresses of the server certificate")
	f.StringSliceVar(&users, "users", []string{"root"}, "etcd users to write client certificates for")
	f.StringVar(&keyType, "key-type", string(rbac.ECDSAP256), "key type: ecdsa-p256 or ed25519")
	f.DurationVar(&validity, "validity", rbac.DefaultValidity, "validity of new certificates")
	f.BoolVar(&force, "force", false, "write into a directory that group or others can write")
	return cmd
}

// CertsError makes a bad argument a usage error.
func CertsError(err error) error {
	if errors.Is(err, rbac.ErrInvalid) {
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	return err
}
