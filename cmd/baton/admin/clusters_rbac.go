package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/rbac"
	"github.com/batonhq/baton/router"
)

// clusterChange is one change of a fanned-out rbac apply, for -o json.
type clusterChange struct {
	Cluster string `json:"cluster"`
	rbac.Change
}

// rbacApplyAcross applies to each cluster the part of p that concerns the
// namespaces it serves. With --prune, a cluster also loses the roles of
// namespaces it no longer serves (moved elsewhere).
func rbacApplyAcross(g *cmdutil.Env, cmd *cobra.Command, p rbac.Policy, dryRun, prune bool) error {
	r, err := g.ClusterMap()
	if err != nil {
		return err
	}
	share := map[string]rbac.Policy{}
	for _, ns := range p.Namespaces {
		c, err := r.Cluster(ns.Name)
		if err != nil {
			return cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("policy namespace %s: %w", ns.Name, err))
		}
		s := share[c.Name]
		s.Namespaces = append(s.Namespaces, ns)
		share[c.Name] = s
	}
	var opts []rbac.ApplyOption
	if dryRun {
		opts = append(opts, rbac.WithDryRun())
	}
	if prune {
		opts = append(opts, rbac.WithPrune())
	}
	type applied struct{ changes []rbac.Change }
	ctx := cmd.Context()
	res, err := cmdutil.EachCluster(ctx, g, func(ctx context.Context, cg *cmdutil.Env, cli *clientv3.Client, c router.Cluster, _ []string) (applied, error) {
		actx, cancel := cg.OpContext(ctx)
		defer cancel()
		changes, err := rbac.Apply(actx, cli, share[c.Name], opts...)
		if err != nil {
			return applied{changes: changes}, cg.Failed("rbac apply", err)
		}
		return applied{changes: changes}, nil
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if g.JSON() {
		rep := struct {
			DryRun   bool                    `json:"dry_run"`
			Clusters []cmdutil.ClusterStatus `json:"clusters"`
			Changes  []clusterChange         `json:"changes"`
		}{DryRun: dryRun, Clusters: cmdutil.Statuses(res), Changes: []clusterChange{}}
		for _, r := range res {
			for _, c := range r.Value.changes {
				rep.Changes = append(rep.Changes, clusterChange{r.Cluster.Name, c})
			}
		}
		if err := cmdutil.WriteJSON(out, rep); err != nil {
			return err
		}
		return cmdutil.Partial(res)
	}
	verb := ""
	if dryRun {
		verb = "would "
	}
	for _, r := range res {
		for _, c := range r.Value.changes {
			fmt.Fprintf(out, "cluster %s: %s%s\n", r.Cluster.Name, verb, c)
		}
		if r.Err == nil && len(r.Value.changes) == 0 {
			fmt.Fprintf(out, "cluster %s: no changes\n", r.Cluster.Name)
		}
	}
	for _, line := range cmdutil.FailureLines(res) {
		fmt.Fprintln(out, line)
	}
	return cmdutil.Partial(res)
}

// clusterPolicy is one cluster's share of a fanned-out rbac show.
type clusterPolicy struct {
	policy rbac.Policy
	authOn bool
	authEr error
}

// rbacShowAcross reads the policy of every cluster and prints them as one
// file that rbac apply --clusters accepts: each namespace as the cluster
// the map routes it to has it. Roles a cluster holds for a namespace the
// map routes elsewhere (left behind by a move) are named on stderr, not
// printed.
func rbacShowAcross(g *cmdutil.Env, cmd *cobra.Command) error {
	r, err := g.ClusterMap()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	res, err := cmdutil.EachCluster(ctx, g, func(ctx context.Context, cg *cmdutil.Env, cli *clientv3.Client, _ router.Cluster, _ []string) (clusterPolicy, error) {
		var out clusterPolicy
		actx, cancel := cg.OpContext(ctx)
		out.authOn, out.authEr = rbac.AuthEnabled(actx, cli)
		cancel()
		p, err := rbac.Show(ctx, cli, rbac.WithRequestTimeout(cg.CommandTimeout))
		if err != nil {
			return out, cg.Failed("rbac show", err)
		}
		out.policy = p
		return out, nil
	})
	if err != nil {
		return err
	}
	errOut := cmd.ErrOrStderr()
	merged := rbac.Policy{Namespaces: []rbac.Namespace{}}
	for _, cr := range res {
		if cr.Err != nil {
			continue
		}
		switch {
		case cr.Value.authEr != nil:
			fmt.Fprintf(errOut, "warning: cluster %s: could not tell whether auth is enabled: %s\n", cr.Cluster.Name, cmdutil.Cell(cr.Value.authEr.Error()))
		case !cr.Value.authOn:
			fmt.Fprintf(errOut, "warning: cluster %s: auth is disabled: its roles are not enforced until `baton auth enable`\n", cr.Cluster.Name)
		}
		for _, ns := range cr.Value.policy.Namespaces {
			home, err := r.Cluster(ns.Name)
			switch {
			case err != nil:
				fmt.Fprintf(errOut, "cluster %s holds roles of namespace %s, which the map does not serve: not shown\n", cr.Cluster.Name, cmdutil.Cell(ns.Name))
			case home.Name != cr.Cluster.Name:
				fmt.Fprintf(errOut, "cluster %s holds roles of namespace %s, which the map routes to cluster %s: not shown (rbac apply --prune removes them)\n",
					cr.Cluster.Name, cmdutil.Cell(ns.Name), home.Name)
			default:
				merged.Namespaces = append(merged.Namespaces, ns)
			}
		}
	}
	slices.SortFunc(merged.Namespaces, func(a, b rbac.Namespace) int { return strings.Compare(a.Name, b.Name) })
	for _, line := range cmdutil.FailureLines(res) {
		fmt.Fprintln(errOut, line)
	}
	out := cmd.OutOrStdout()
	if g.JSON() {
		if err := cmdutil.WriteJSON(out, merged); err != nil {
			return err
		}
		return cmdutil.Partial(res)
	}
	data, err := rbac.Encode(merged)
	if err != nil {
		return err
	}
	for _, cr := range res {
		state := strings.Join(cr.Namespaces, ", ")
		if cr.Err != nil {
			state = "did not answer: its namespaces are missing below"
		}
		fmt.Fprintf(out, "# cluster %s: %s\n", cr.Cluster.Name, state)
	}
	if _, err := out.Write(data); err != nil {
		return err
	}
	return cmdutil.Partial(res)
}
