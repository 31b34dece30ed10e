package dev

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/router"
)

// maxDevClusters bounds baton dev --clusters.
const maxDevClusters = 9

// devClusters is baton dev --clusters N: N independent single-member
// clusters and a cluster map that routes namespaces to them.
type devClusters struct {
	n          int
	mapPath    string
	namespaces []string
}

func addDevClusterFlags(f *pflag.FlagSet) *devClusters {
	d := &devClusters{}
	f.IntVar(&d.n, "clusters", 0, fmt.Sprintf("start N independent clusters (1 to %d) and write a cluster map for them", maxDevClusters))
	f.StringVar(&d.mapPath, "map", "", "with --clusters: write the cluster map to FILE (default: clusters.yaml in --data-dir, else a temporary file)")
	f.StringSliceVar(&d.namespaces, "namespaces", []string{"payments", "jobs"}, "with --clusters: namespaces spread over the clusters in turn; the first cluster also serves every other")
	return d
}

// Run starts the clusters, writes the map and serves until ctx ends.
// Listening ports: cluster i uses the --listen and --listen-peer ports
// plus 2i (port 0: free ports).
func (d *devClusters) Run(ctx context.Context, cmd *cobra.Command, dataDir, listen, listenPeer string) error {
	if d.n < 1 || d.n > maxDevClusters {
		return cmdutil.UsageErrorf("--clusters %d: must be 1 to %d", d.n, maxDevClusters)
	}
	for _, f := range []string{"tls", "auth", "policy"} {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return cmdutil.UsageErrorf("--%s and --clusters: a secure set-up of several clusters is not supported by baton dev", f)
		}
	}
	for _, ns := range d.namespaces {
		if err := keys.ValidateNamespace(ns); err != nil {
			return cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("--namespaces: %w", err))
		}
	}
	addr := func(base string, i int) (string, error) {
		host, port, err := net.SplitHostPort(base)
		if err != nil {
			return "", err
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p+2*i > 65535 {
			return "", fmt.Errorf("port %q", port)
		}
		if p == 0 {
			return "", nil
		}
		return net.JoinHostPort(host, strconv.Itoa(p+2*i)), nil
	}
	m := router.Map{Default: "dev-1"}
	var servers []*embedetcd.Server
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	for i := range d.n {
		name := fmt.Sprintf("dev-%d", i+1)
		client, err := addr(listen, i)
		if err != nil {
			return cmdutil.UsageErrorf("--listen %s: %v", listen, err)
		}
		peer, err := addr(listenPeer, i)
		if err != nil {
			return cmdutil.UsageErrorf("--listen-peer %s: %v", listenPeer, err)
		}
		cfg := embedetcd.Config{Name: name, ClientAddr: client, PeerAddr: peer}
		if dataDir != "" {
			cfg.Dir = filepath.Join(dataDir, name)
		}
		srv, err := embedetcd.New(cfg)
		if err != nil {
			return fmt.Errorf("start cluster %s: %w", name, err)
		}
		servers = append(servers, srv)
		c := router.Cluster{Name: name, Endpoints: srv.Endpoints()}
		// Pinned, so that the map refuses another cluster on these ports.
		id, err := identify(ctx, srv)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		c.ID, c.Revision = id.String(), id.Revision
		m.Clusters = append(m.Clusters, c)
	}
	for j, ns := range d.namespaces {
		c := &m.Clusters[j%d.n]
		c.Namespaces = append(c.Namespaces, ns)
	}
	data, err := m.Encode()
	if err != nil {
		return err
	}
	path := d.mapPath
	switch {
	case path == "" && dataDir != "":
		path = filepath.Join(dataDir, "clusters.yaml")
	case path == "":
		f, err := os.CreateTemp("", "baton-clusters-*.yaml")
		if err != nil {
			return err
		}
		path = f.Name()
		_ = f.Close()
		defer os.Remove(path)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write the cluster map: %w", err)
	}
	out := cmd.OutOrStdout()
	for i, c := range m.Clusters {
		serves := strings.Join(c.Namespaces, ", ")
		if c.Name == m.Default {
			serves = strings.TrimPrefix(serves+", and every other namespace", ", ")
		}
		fmt.Fprintf(out, "cluster %s serving at %s, data in %s: %s\n", c.Name, servers[i].Endpoint(), servers[i].Dir(), serves)
	}
	fmt.Fprintf(out, "cluster map in %s\nexport BATON_CLUSTERS=%s\npress Ctrl-C to stop\n", path, path)
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the clusters")
	return nil
}

// identify asks a member just started who it is.
func identify(ctx context.Context, srv *embedetcd.Server) (router.Identity, error) {
	cli, err := srv.NewClient()
	if err != nil {
		return router.Identity{}, err
	}
	defer cli.Close()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return router.Identify(ictx, cli)
}
