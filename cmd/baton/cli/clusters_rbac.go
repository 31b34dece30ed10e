package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

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
func (g *globals) rbacApplyAcross(cmd *cobra.Command, p rbac.Policy, dryRun, prune bool) error {
	r, err := g.clusterMap()
	if err != nil {
		return err
	}
	share := map[string]rbac.Policy{}
	for _, ns := range p.Namespaces {
		c, err := r.Cluster(ns.Name)
		if err != nil {
			return withCode(ExitUsage, fmt.Errorf("policy namespace %s: %w", ns.Name, err))
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
	res, err := eachCluster(ctx, g, func(ctx context.Context, cg *globals, cli *clientv3.Client, c router.Cluster, _ []string) (applied, error) {
		actx, cancel := cg.opContext(ctx)
		defer cancel()
		changes, err := rbac.Apply(actx, cli, share[c.Name], opts...)
		if err != nil {
			return applied{changes: changes}, cg.failed("rbac apply", err)
		}
		return applied{changes: changes}, nil
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if g.json() {
		rep := struct {
			DryRun   bool            `json:"dry_run"`
			Clusters []clusterStatus `json:"clusters"`
			Changes  []clusterChange `json:"changes"`
		}{DryRun: dryRun, Clusters: statuses(res), Changes: []clusterChange{}}
		for _, r := range res {
			for _, c := range r.Value.changes {
				rep.Changes = append(rep.Changes, clusterChange{r.Cluster.Name, c})
			}
		}
		if err := writeJSON(out, rep); err != nil {
			return err
		}
		return partial(res)
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
	for _, line := range failureLines(res) {
		fmt.Fprintln(out, line)
	}
	return partial(res)
}
