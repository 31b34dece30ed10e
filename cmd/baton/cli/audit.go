package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// auditView is what `baton audit` shows.
type auditView struct {
	Namespace string
	Records   []auditRecord
}

func writeAudit(w io.Writer, asJSON bool, v auditView) error {
	if asJSON {
		recs := v.Records
		if recs == nil {
			recs = []auditRecord{}
		}
		return writeJSON(w, struct {
			Namespace string        `json:"namespace"`
			Records   []auditRecord `json:"records"`
		}{v.Namespace, recs})
	}
	if len(v.Records) == 0 {
		_, err := fmt.Fprintf(w, "no audit records in namespace %q\n", v.Namespace)
		return err
	}
	t := newTable(w, "TIME", "ACTION", "LOCK", "HOLDER", "TOKEN", "RENEWED", "BY", "RESULT", "REASON")
	for _, r := range v.Records {
		by := r.OSUser + "@" + r.Host
		if r.EtcdUser != "" {
			by += " (etcd " + r.EtcdUser + ")"
		}
		renewed := "no"
		if r.Renewed {
			renewed = "yes (forced)"
		}
		t.row(r.Time.UTC().Format(time.RFC3339), r.Action, r.Lock, dash(r.Holder), fmt.Sprint(r.Token), renewed, by, r.Result, r.Reason)
	}
	return t.flush()
}

func newAuditCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "List the force-unlock records of the namespace, oldest first",
		Args:  args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.fanOut(cmd) {
				return g.auditAcross(cmd)
			}
			ctx := cmd.Context()
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			octx, cancel := g.opContext(ctx)
			defer cancel()
			resp, err := cli.Get(octx, keys.KindPrefix(g.namespace, keys.Audit), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return g.failed("read audit records", err)
			}
			v := auditView{Namespace: g.namespace}
			for _, kv := range resp.Kvs {
				var r auditRecord
				if json.Unmarshal(kv.Value, &r) == nil {
					v.Records = append(v.Records, r)
				}
			}
			return writeAudit(cmd.OutOrStdout(), g.json(), v)
		},
	}
}
