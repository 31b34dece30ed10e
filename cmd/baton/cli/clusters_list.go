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

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

// clusterLock is a lock of a fanned-out `baton locks`.
type clusterLock struct {
	Namespace string
	lockRow
}

// locksAcross lists the locks of every namespace of every cluster.
func (g *globals) locksAcross(cmd *cobra.Command, prefix string) error {
	ctx := cmd.Context()
	res, err := eachCluster(ctx, g, func(ctx context.Context, cg *globals, cli *clientv3.Client, _ router.Cluster, nss []string) ([]clusterLock, error) {
		octx, cancel := cg.opContext(ctx)
		defer cancel()
		var out []clusterLock
		for _, ns := range nss {
			infos, err := mutex.List(octx, cli, mutex.WithNamespace(ns))
			if err != nil {
				return nil, cg.failed("list locks of "+ns, err)
			}
			held, err := readHeld(octx, cli, ns, keys.Lock, "")
			if err != nil {
				return nil, cg.failed("read acquisition records of "+ns, err)
			}
			for _, info := range infos {
				if strings.HasPrefix(info.Name, prefix) {
					out = append(out, clusterLock{Namespace: ns, lockRow: lockRow{Name: info.Name, Holder: info.Holder,
						Since: heldLookup(held, info.Name, info.Holder.Lease), Waiters: len(info.Waiters)}})
				}
			}
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

func writeLocksAcross(w io.Writer, asJSON bool, prefix string, now time.Time, res []clusterResult[[]clusterLock]) error {
	if asJSON {
		type row struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
			lockJSON
		}
		out := struct {
			Clusters []clusterStatus `json:"clusters"`
			Locks    []row           `json:"locks"`
		}{Clusters: statuses(res), Locks: []row{}}
		for _, r := range res {
			for _, l := range r.Value {
				out.Locks = append(out.Locks, row{Cluster: r.Cluster.Name, Namespace: l.Namespace, lockJSON: lockJSON{
					Name: l.Name, Holder: l.Holder.Identity, Key: l.Holder.Key, Token: int64(l.Holder.Token),
					Lease: leaseHex(int64(l.Holder.Lease)), TTLLeft: ttlSeconds(l.Holder.TTL),
					HeldSince: since(l.Since), HeldFor: sinceSeconds(now, l.Since), Waiters: l.Waiters}})
			}
		}
		return writeJSON(w, out)
	}
	n := 0
	for _, r := range res {
		n += len(r.Value)
	}
	if n == 0 {
		what := "no locks are held in the namespaces of the clusters that answered"
		if prefix != "" {
			what += " under " + strconv.Quote(prefix)
		}
		fmt.Fprintln(w, what)
	} else {
		t := newTable(w, "CLUSTER", "NAMESPACE", "NAME", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
		for _, r := range res {
			for _, l := range r.Value {
				t.row(r.Cluster.Name, l.Namespace, cell(l.Name), cell(dash(l.Holder.Identity)), l.Holder.Token.String(),
					ttlText(l.Holder.TTL), ageText(now, l.Since), strconv.Itoa(l.Waiters), cell(l.Holder.Key))
			}
		}
		if err := t.flush(); err != nil {
			return err
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
