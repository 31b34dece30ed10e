package dev

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/embedetcd"
)

// DevSettings is the embedded etcd `baton dev` is about to start. A
// devExtension may change it before the start.
type DevSettings struct {
	// Config is the member; Config.Tune may be chained, not replaced
	// (see tune).
	Config embedetcd.Config
	// Hints are lines printed after the endpoint, e.g. the flags or
	// environment a client needs.
	Hints []string
	// Auth is set by an extension that enables etcd's auth.
	Auth bool
}

// Tune adds an adjustment of the embed configuration after the ones
// already set.
func (s *DevSettings) Tune(f func(*embed.Config)) {
	prev := s.Config.Tune
	s.Config.Tune = func(c *embed.Config) {
		if prev != nil {
			prev(c)
		}
		f(c)
	}
}

// devExtension adds flags to `baton dev` and a say in how it starts:
// Before may change the settings (TLS, client-cert auth, embed options),
// After runs once etcd serves (e.g. to create users and enable auth).
// Either may be nil.
type devExtension struct {
	Flags  func(fs *pflag.FlagSet)
	Before func(ctx context.Context, s *DevSettings) error
	After  func(ctx context.Context, srv *embedetcd.Server, s *DevSettings, out io.Writer) error
}

// devExtensions is the one list of extensions of `baton dev` (TLS and auth
// are added here, each by its own file).
func devExtensions(g *cmdutil.Env) []devExtension {
	return []devExtension{secureDev(g)}
}

func NewCmdDev(g *cmdutil.Env) *cobra.Command {
	var dataDir, listen, listenPeer string
	exts := devExtensions(g)
	var clusters *devClusters
	cmd := &cobra.Command{
		Use:   "dev [--data-dir DIR] [--listen 127.0.0.1:2379]",
		Short: "Serve an embedded single-member etcd for local use, until interrupted",
		Long: `Start a single-member etcd in this process, print its endpoint, and serve
until SIGINT or SIGTERM. Without --data-dir the data lives in a temporary
directory removed on exit; with it, the data is kept and a restart on the same
directory finds it again; a second baton dev on a directory in use exits at
once. Every other baton command reaches it with no flags. Listening beyond
loopback without --tls and --auth prints a warning: everything is open.
With --clusters N, start N independent clusters instead and write a cluster
map routing --namespaces to them, for --clusters FILE (docs/scaling.md).`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if cmd.Flags().Changed("clusters") {
				return clusters.Run(ctx, cmd, dataDir, listen, listenPeer)
			}
			s := &DevSettings{Config: embedetcd.Config{Dir: dataDir, ClientAddr: listen, PeerAddr: listenPeer, Name: "baton-dev"}}
			for _, x := range exts {
				if x.Before != nil {
					if err := x.Before(ctx, s); err != nil {
						return err
					}
				}
			}
			if dataDir != "" {
				release, err := lockDataDir(dataDir)
				if err != nil {
					return err
				}
				defer release()
			}
			if w := exposure(listen, s.Config.TLS != nil, s.Auth); w != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "baton: %s\n", w)
			}
			srv, err := embedetcd.New(s.Config)
			if err != nil {
				return fmt.Errorf("start etcd: %w", err)
			}
			defer srv.Stop()
			out := cmd.OutOrStdout()
			for _, x := range exts {
				if x.After != nil {
					if err := x.After(ctx, srv, s, out); err != nil {
						return err
					}
				}
			}
			dir := srv.Dir()
			if dataDir == "" {
				dir += " (temporary, removed on exit)"
			}
			fmt.Fprintf(out, "etcd serving at %s\ndata in %s\n", srv.Endpoint(), dir)
			for _, h := range s.Hints {
				fmt.Fprintln(out, h)
			}
			fmt.Fprintln(out, "press Ctrl-C to stop")
			<-ctx.Done()
			fmt.Fprintln(out, "stopping etcd")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "keep the data in DIR (default: a temporary directory, removed on exit)")
	f.StringVar(&listen, "listen", cmdutil.DefaultEndpoint, "client address, host:port")
	f.StringVar(&listenPeer, "listen-peer", "127.0.0.1:2380", "peer address, host:port")
	clusters = addDevClusterFlags(f)
	for _, x := range exts {
		if x.Flags != nil {
			x.Flags(f)
		}
	}
	return cmd
}
