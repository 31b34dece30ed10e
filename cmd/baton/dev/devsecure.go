package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/cmd/baton/admin"
	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/rbac"
)

// secureDev adds --tls DIR, --auth and --policy FILE to baton dev: TLS with
// client-certificate auth from a development CA, auth enabled with a root
// that has no password, and a policy applied, so that the secure set-up is
// one command locally too.
func secureDev(_ *cmdutil.Env) devExtension {
	var dir, policy string
	var auth bool
	return devExtension{
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&dir, "tls", "", "serve TLS with client-certificate auth, certificates from the development CA in DIR (made by certs init, or created)")
			fs.BoolVar(&auth, "auth", false, "enable auth (root without password, reached by the root certificate); needs --tls")
			fs.StringVar(&policy, "policy", "", "apply this policy file once etcd serves; needs --auth")
		},
		Before: func(_ context.Context, s *DevSettings) error {
			switch {
			case dir == "" && auth:
				return cmdutil.UsageErrorf("--auth needs --tls: root has no password and is reached by its certificate")
			case policy != "" && !auth:
				return cmdutil.UsageErrorf("--policy needs --auth")
			case dir == "":
				return nil
			}
			if policy != "" {
				if _, err := rbac.LoadFile(policy); err != nil {
					return cmdutil.WithCode(cmdutil.ExitUsage, err)
				}
			}
			s.Auth = auth
			ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
			if err != nil {
				return admin.CertsError(err)
			}
			hosts := []string{"localhost", "127.0.0.1"}
			if h, _, err := net.SplitHostPort(s.Config.ClientAddr); err == nil && h != "localhost" && h != "127.0.0.1" && h != "" {
				hosts = append(hosts, h)
			}
			server, err := ca.IssueServer(hosts, rbac.CertOptions{})
			if err != nil {
				return admin.CertsError(err)
			}
			root := rbac.ClientFiles(dir, "root")
			if _, err := os.Stat(root.Cert); errors.Is(err, os.ErrNotExist) {
				if _, err := ca.IssueClient("root", rbac.CertOptions{}); err != nil {
					return err
				}
			}
			info, err := server.ServerInfo()
			if err != nil {
				return err
			}
			s.Config.TLS = &info
			s.Hints = append(s.Hints,
				fmt.Sprintf("TLS with client certificates: every client needs --cacert %s --cert CERT --key KEY", root.CA),
				fmt.Sprintf("as root: --cacert %s --cert %s --key %s", root.CA, root.Cert, root.Key))
			return nil
		},
		After: func(ctx context.Context, srv *embedetcd.Server, s *DevSettings, out io.Writer) error {
			if !auth {
				return nil
			}
			tlsCfg, err := rbac.ClientFiles(dir, "root").ClientConfig()
			if err != nil {
				return err
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return err
			}
			defer cli.Close()
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := rbac.EnableAuth(actx, cli, ""); err != nil {
				return err
			}
			s.Hints = append(s.Hints, "auth enabled: users are named by their certificate's CN (baton certs init --dir DIR --users ...)")
			if policy == "" {
				return nil
			}
			p, err := rbac.LoadFile(policy)
			if err != nil {
				return err
			}
			changes, err := rbac.Apply(actx, cli, p)
			if err != nil {
				return err
			}
			s.Hints = append(s.Hints, fmt.Sprintf("policy %s applied (%d changes)", policy, len(changes)))
			return nil
		},
	}
}
