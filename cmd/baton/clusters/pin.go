package clusters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/router"
)

// liveIdentity is what one cluster of a map answered when asked who it is.
type liveIdentity struct {
	Cluster  string `json:"cluster"`
	Pinned   string `json:"pinned,omitempty"`
	ID       string `json:"id,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	OK       bool   `json:"ok"`
	Problem  string `json:"problem,omitempty"`
	err      error
	unpinned bool // verified, and the map pins nothing
}

// identities connects to every cluster of the map at path, in parallel,
// and asks each who it is. With verify, a cluster is checked against its
// pin (a cluster without one is a problem); without, whatever answers is
// reported, for pin to write down.
func identities(g *cmdutil.Env, ctx context.Context, path string, verify bool) ([]liveIdentity, error) {
	r, err := router.Load(path, router.WithGetenv(g.IO.Getenv))
	if err != nil {
		return nil, cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	defer r.Close()
	cs := r.Clusters()
	out := make([]liveIdentity, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		out[i] = liveIdentity{Cluster: c.Name, Pinned: c.ID}
		wg.Go(func() {
			res := &out[i]
			fail := func(err error) {
				res.err = fmt.Errorf("cluster %s: %w", c.Name, err)
				res.Problem = res.err.Error()
			}
			if verify && c.ID == "" {
				res.unpinned = true
				fail(errors.New("the map pins no identity: run baton clusters pin"))
				return
			}
			if !verify {
				c.ID, c.Revision = "", 0 // learn whatever answers
			}
			cg, err := g.ForCluster(c)
			if err != nil {
				fail(err)
				return
			}
			if len(c.Namespaces) > 0 {
				cg.Namespace = c.Namespaces[0] // the connection's probe reads it: a user may read only its own
			}
			cli, err := cg.Client(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer cli.Close()
			octx, cancel := cg.OpContext(ctx)
			defer cancel()
			id, err := router.Identify(octx, cli)
			if err != nil {
				fail(cg.Failed("identify", err))
				return
			}
			res.ID, res.Revision, res.OK = id.String(), id.Revision, true
		})
	}
	wg.Wait()
	return out, nil
}

// identityError is the error of a check over identities: the first
// failure's code (ExitDenied for a cluster that is not the one pinned,
// ExitUnavailable when it cannot be reached), all of them joined.
func identityError(ids []liveIdentity) error {
	var errs []error
	code := cmdutil.ExitOK
	for _, id := range ids {
		if id.err != nil {
			errs = append(errs, id.err)
			if code == cmdutil.ExitOK {
				code = cmdutil.ExitCode(id.err)
				if errors.Is(id.err, router.ErrIdentity) || id.unpinned {
					code = cmdutil.ExitError
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return cmdutil.WithCode(code, errors.Join(errs...))
}

func writeIdentities(cmd *cobra.Command, ids []liveIdentity) error {
	t := cmdutil.NewTable(cmd.OutOrStdout(), "CLUSTER", "PINNED", "ANSWERS AS", "REVISION", "STATE")
	for _, id := range ids {
		state := "verified"
		if !id.OK {
			state = cmdutil.Cell(id.Problem)
		}
		rev := "-"
		if id.OK {
			rev = strconv.FormatInt(id.Revision, 10)
		}
		t.Row(id.Cluster, cmdutil.Dash(id.Pinned), cmdutil.Dash(id.ID), rev, state)
	}
	return t.Flush()
}

func newClustersCheckCmd(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "check [MAP]",
		Short: "Check that each cluster of a map is the etcd cluster it pins",
		Long: `Connect to every cluster of MAP (default: --clusters or BATON_CLUSTERS) and
check that its endpoints answer as the etcd cluster the map pins (id), at a
revision no lower than the pinned one (revision). A cluster that pins no
identity is a problem: run baton clusters pin. Exit 0 when every cluster is
verified, 1 when one is not the cluster pinned or pins none, 69 when one
cannot be reached, 64 when the map cannot be read.`,
		Example: `  baton clusters check clusters.yaml`,
		Args:    cmdutil.Args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			path, err := mapArg(g, a)
			if err != nil {
				return err
			}
			ids, err := identities(g, cmd.Context(), path, true)
			if err != nil {
				return err
			}
			if g.JSON() {
				if err := cmdutil.WriteJSON(cmd.OutOrStdout(), ids); err != nil {
					return err
				}
			} else if err := writeIdentities(cmd, ids); err != nil {
				return err
			}
			return identityError(ids)
		},
	}
}

func newClustersPinCmd(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "pin [MAP]",
		Short: "Write a cluster map with each cluster's etcd identity pinned",
		Long: `Connect to every cluster of MAP (default: --clusters or BATON_CLUSTERS), ask
each who it is (its etcd cluster ID, through a linearizable member listing,
and the greatest revision its endpoints report; every endpoint must answer as
the same cluster), and print MAP on standard output with each cluster's id and
revision set. Comments are not kept. A pin that changes is reported on
standard error: the name now leads to another etcd cluster, so its epoch must
be raised before the map is used (baton clusters check-move insists). Exit 0
when every cluster answered, 69 when one could not be reached, 64 when the
map cannot be read; nothing is printed unless every cluster answered.`,
		Example: `  baton clusters pin clusters-next.yaml > clusters-pinned.yaml`,
		Args:    cmdutil.Args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			path, err := mapArg(g, a)
			if err != nil {
				return err
			}
			m, err := readMap("MAP", path)
			if err != nil {
				return err
			}
			ids, err := identities(g, cmd.Context(), path, false)
			if err != nil {
				return err
			}
			if err := identityError(ids); err != nil {
				return err
			}
			for i, id := range ids {
				c := &m.Clusters[i]
				if c.ID != "" && c.ID != id.ID {
					fmt.Fprintf(cmd.ErrOrStderr(), "cluster %s: the name now leads to etcd cluster %s, not %s as pinned: raise its epoch above %d\n",
						c.Name, id.ID, c.ID, c.Epoch)
				}
				c.ID, c.Revision = id.ID, id.Revision
			}
			data, err := m.Encode()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
}

// mapArg is the map a clusters command works on: its argument, else the
// map in force.
func mapArg(g *cmdutil.Env, a []string) (string, error) {
	if len(a) == 1 {
		return a[0], nil
	}
	if g.Clusters != nil && g.Clusters.File != "" {
		return g.Clusters.File, nil
	}
	return "", cmdutil.UsageErrorf("no cluster map: give MAP, --clusters FILE or BATON_CLUSTERS")
}
