package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/router"
)

// clusterLock is a lock of a fanned-out `baton locks`.
// nsLocks is what baton locks shows of one namespace of a cluster.
type nsLocks = locksView

// locksAcross lists the locks of every namespace of every cluster, with
// their running lock-delays and pending release requests.
func (g *globals) locksAcross(cmd *cobra.Command, prefix string) error {
	ctx := cmd.Context()
	res, err := eachCluster(ctx, g, func(ctx context.Context, cg *globals, cli *clientv3.Client, _ router.Cluster, nss []string) ([]nsLocks, error) {
		octx, cancel := cg.opContext(ctx)
		defer cancel()
		var out []nsLocks
		for _, ns := range nss {
			v, what, err := readLocks(octx, cli, ns, prefix)
			if err != nil {
				return nil, cg.failed(what+" of "+ns, err)
			}
			out = append(out, v)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	if werr := writeLocksAcross(cmd.OutOrStdout(), g.json(), prefix, g.io.Now(), res); werr != nil {
		return werr
	}
	return partial(res)
}

func writeLocksAcross(w io.Writer, asJSON bool, prefix string, now time.Time, res []clusterResult[[]nsLocks]) error {
	if asJSON {
		type where struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
		}
		type row struct {
			where
			lockJSON
		}
		type delayRowJSON struct {
			where
			delayJSON
		}
		out := struct {
			Clusters []clusterStatus `json:"clusters"`
			Locks    []row           `json:"locks"`
			Delays   []delayRowJSON  `json:"lock_delays"`
		}{Clusters: statuses(res), Locks: []row{}, Delays: []delayRowJSON{}}
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
		return writeJSON(w, out)
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
		t := newTable(w, "CLUSTER", "NAMESPACE", "NAME", "KIND", "HOLDERS", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
		for _, r := range res {
			for _, v := range r.Value {
				for _, l := range v.Locks {
					t.row(r.Cluster.Name, v.Namespace, cell(l.Name), rowKind(l), holdersCell(l), cell(dash(l.Holder.Identity)), l.Holder.Token.String(),
						ttlText(l.Holder.TTL), ageText(now, l.Since), strconv.Itoa(l.Waiters), cell(l.Holder.Key))
				}
			}
		}
		if err := t.flush(); err != nil {
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
					fmt.Fprintf(w, "cluster %s, namespace %s: %s", safe(r.Cluster.Name), safe(v.Namespace), line)
				}
			}
		}
	}
	for _, line := range failureLines(res) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// clusterAudit is an audit record of a fanned-out `baton audit`.
type clusterAudit struct {
	Namespace string
	auditEntry
}

// auditAcross lists the audit records (force-unlocks and release
// requests) of every namespace of every cluster, each namespace's in time
// order.
func (g *globals) auditAcross(cmd *cobra.Command) error {
	ctx := cmd.Context()
	res, err := eachCluster(ctx, g, func(ctx context.Context, cg *globals, cli *clientv3.Client, _ router.Cluster, nss []string) ([]clusterAudit, error) {
		octx, cancel := cg.opContext(ctx)
		defer cancel()
		var out []clusterAudit
		for _, ns := range nss {
			resp, err := cli.Get(octx, auditPrefix(ns), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return nil, cg.failed("read audit records of "+ns, err)
			}
			entries := make([]auditEntry, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				entries = append(entries, parseAudit(string(kv.Key), kv.Value))
			}
			sortAudit(ns, entries)
			for _, e := range entries {
				out = append(out, clusterAudit{Namespace: ns, auditEntry: e})
			}
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if g.json() {
		type row struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
			auditJSON
		}
		out := struct {
			Clusters []clusterStatus `json:"clusters"`
			Records  []row           `json:"records"`
		}{Clusters: statuses(res), Records: []row{}}
		for _, r := range res {
			for _, a := range r.Value {
				j := auditJSON{AuditKey: a.Key, Malformed: a.Malformed, Raw: a.Raw}
				if a.Malformed == "" {
					rec := a.Record
					j.auditRecord = &rec
				}
				out.Records = append(out.Records, row{r.Cluster.Name, a.Namespace, j})
			}
		}
		if err := writeJSON(w, out); err != nil {
			return err
		}
		return partial(res)
	}
	n := 0
	for _, r := range res {
		n += len(r.Value)
	}
	if n == 0 {
		fmt.Fprintln(w, "no audit records in the namespaces of the clusters that answered")
	} else {
		t := newTable(w, "CLUSTER", "NAMESPACE", "TIME", "ACTION", "NAME", "HOLDER", "TOKEN", "ETCD IDENTITY", "FROM (UNVERIFIED)", "RESULT", "REASON")
		for _, r := range res {
			for _, a := range r.Value {
				if a.Malformed != "" {
					t.row(safe(r.Cluster.Name), safe(a.Namespace), "-", "MALFORMED", "-", "-", "-", "-", "-",
						"not a record: "+safe(a.Malformed), "key "+safe(a.Key))
					continue
				}
				rec := a.Record
				id := auditIdentity(rec)
				if rec.Identity == "" && rec.IdentitySource == identityAuthOff {
					id = "(auth disabled)"
				}
				t.row(safe(r.Cluster.Name), safe(a.Namespace), rec.Time.UTC().Format(time.RFC3339), safe(rec.Action), safe(rec.Name),
					safe(dash(rec.Holder)), strconv.FormatInt(rec.Token, 10), id, safe(rec.OSUser)+"@"+safe(rec.Host), safe(rec.Result), safe(rec.Reason))
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	for _, line := range failureLines(res) {
		fmt.Fprintln(w, line)
	}
	return partial(res)
}
