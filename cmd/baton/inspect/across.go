package inspect

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/router"
)

// clusterLock is a lock of a fanned-out `baton locks`.
// nsLocks is what baton locks shows of one namespace of a cluster.
type nsLocks = LocksView

// locksAcross lists the locks of every namespace of every cluster, with
// their running lock-delays and pending release requests.
func locksAcross(g *cmdutil.Env, cmd *cobra.Command, prefix string) error {
	ctx := cmd.Context()
	res, err := cmdutil.EachCluster(ctx, g, func(ctx context.Context, cg *cmdutil.Env, cli *clientv3.Client, _ router.Cluster, nss []string) ([]nsLocks, error) {
		octx, cancel := cg.OpContext(ctx)
		defer cancel()
		var out []nsLocks
		for _, ns := range nss {
			v, what, err := readLocks(octx, cli, ns, prefix)
			if err != nil {
				return nil, cg.Failed(what+" of "+ns, err)
			}
			out = append(out, v)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	if werr := writeLocksAcross(cmd.OutOrStdout(), g.JSON(), prefix, g.IO.Now(), res); werr != nil {
		return werr
	}
	return cmdutil.Partial(res)
}

func writeLocksAcross(w io.Writer, asJSON bool, prefix string, now time.Time, res []cmdutil.ClusterResult[[]nsLocks]) error {
	if asJSON {
		type where struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
		}
		type row struct {
			where
			LockJSON
		}
		type delayRowJSON struct {
			where
			DelayJSON
		}
		out := struct {
			Clusters []cmdutil.ClusterStatus `json:"clusters"`
			Locks    []row                   `json:"locks"`
			Delays   []delayRowJSON          `json:"lock_delays"`
		}{Clusters: cmdutil.Statuses(res), Locks: []row{}, Delays: []delayRowJSON{}}
		for _, r := range res {
			for _, v := range r.Value {
				at := where{r.Cluster.Name, v.Namespace}
				for _, l := range v.Locks {
					out.Locks = append(out.Locks, row{at, lockJSONOf(l, now)})
				}
				for _, d := range delaysJSON(v.Delays) {
					out.Delays = append(out.Delays, delayRowJSON{at, d})
				}
			}
		}
		return cmdutil.WriteJSON(w, out)
	}
	n := 0
	for _, r := range res {
		for _, v := range r.Value {
			n += len(v.Locks)
		}
	}
	if n == 0 {
		what := "no locks are held in the namespaces of the clusters that answered"
		if prefix != "" {
			what += " under " + strconv.Quote(prefix)
		}
		fmt.Fprintln(w, what)
	} else {
		t := cmdutil.NewTable(w, "CLUSTER", "NAMESPACE", "NAME", "KIND", "HOLDERS", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
		for _, r := range res {
			for _, v := range r.Value {
				for _, l := range v.Locks {
					t.Row(r.Cluster.Name, v.Namespace, cmdutil.Cell(l.Name), keyspace.RowKind(l), holdersCell(l), cmdutil.Cell(cmdutil.Dash(l.Holder.Identity)), l.Holder.Token.String(),
						cmdutil.TTLText(l.Holder.TTL), cmdutil.AgeText(now, l.Since), strconv.Itoa(l.Waiters), cmdutil.Cell(l.Holder.Key))
				}
			}
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	// Sets, lock-delays and release requests, each line after its place.
	for _, r := range res {
		for _, v := range r.Value {
			var b strings.Builder
			if err := writeSets(&b, v.Locks); err != nil {
				return err
			}
			if err := writeLockState(&b, v.Locks, v.Delays); err != nil {
				return err
			}
			for _, line := range strings.SplitAfter(b.String(), "\n") {
				if line != "" {
					fmt.Fprintf(w, "cluster %s, namespace %s: %s", cmdutil.Safe(r.Cluster.Name), cmdutil.Safe(v.Namespace), line)
				}
			}
		}
	}
	for _, line := range cmdutil.FailureLines(res) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// clusterAudit is an audit record of a fanned-out `baton audit`.
type clusterAudit struct {
	Namespace string
	keyspace.AuditEntry
}

// auditAcross lists the audit records (force-unlocks and release
// requests) of every namespace of every cluster, each namespace's in time
// order.
func auditAcross(g *cmdutil.Env, cmd *cobra.Command) error {
	ctx := cmd.Context()
	res, err := cmdutil.EachCluster(ctx, g, func(ctx context.Context, cg *cmdutil.Env, cli *clientv3.Client, _ router.Cluster, nss []string) ([]clusterAudit, error) {
		octx, cancel := cg.OpContext(ctx)
		defer cancel()
		var out []clusterAudit
		for _, ns := range nss {
			resp, err := cli.Get(octx, keyspace.AuditPrefix(ns), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return nil, cg.Failed("read audit records of "+ns, err)
			}
			entries := make([]keyspace.AuditEntry, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				entries = append(entries, keyspace.ParseAudit(string(kv.Key), kv.Value))
			}
			keyspace.SortAudit(ns, entries)
			for _, e := range entries {
				out = append(out, clusterAudit{Namespace: ns, AuditEntry: e})
			}
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if g.JSON() {
		type row struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
			keyspace.AuditJSON
		}
		out := struct {
			Clusters []cmdutil.ClusterStatus `json:"clusters"`
			Records  []row                   `json:"records"`
		}{Clusters: cmdutil.Statuses(res), Records: []row{}}
		for _, r := range res {
			for _, a := range r.Value {
				j := keyspace.AuditJSON{AuditKey: a.Key, Malformed: a.Malformed, Raw: a.Raw}
				if a.Malformed == "" {
					rec := a.Record
					j.AuditRecord = &rec
				}
				out.Records = append(out.Records, row{r.Cluster.Name, a.Namespace, j})
			}
		}
		if err := cmdutil.WriteJSON(w, out); err != nil {
			return err
		}
		return cmdutil.Partial(res)
	}
	n := 0
	for _, r := range res {
		n += len(r.Value)
	}
	if n == 0 {
		fmt.Fprintln(w, "no audit records in the namespaces of the clusters that answered")
	} else {
		t := cmdutil.NewTable(w, "CLUSTER", "NAMESPACE", "TIME", "ACTION", "NAME", "HOLDER", "TOKEN", "ETCD IDENTITY", "FROM (UNVERIFIED)", "RESULT", "REASON")
		for _, r := range res {
			for _, a := range r.Value {
				if a.Malformed != "" {
					t.Row(cmdutil.Safe(r.Cluster.Name), cmdutil.Safe(a.Namespace), "-", "MALFORMED", "-", "-", "-", "-", "-",
						"not a record: "+cmdutil.Safe(a.Malformed), "key "+cmdutil.Safe(a.Key))
					continue
				}
				rec := a.Record
				id := keyspace.AuditIdentity(rec)
				if rec.Identity == "" && rec.IdentitySource == cmdutil.IdentityAuthOff {
					id = "(auth disabled)"
				}
				t.Row(cmdutil.Safe(r.Cluster.Name), cmdutil.Safe(a.Namespace), rec.Time.UTC().Format(time.RFC3339), cmdutil.Safe(rec.Action), cmdutil.Safe(rec.Name),
					cmdutil.Safe(cmdutil.Dash(rec.Holder)), strconv.FormatInt(rec.Token, 10), id, cmdutil.Safe(rec.OSUser)+"@"+cmdutil.Safe(rec.Host), cmdutil.Safe(rec.Result), cmdutil.Safe(rec.Reason))
			}
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	for _, line := range cmdutil.FailureLines(res) {
		fmt.Fprintln(w, line)
	}
	return cmdutil.Partial(res)
}
