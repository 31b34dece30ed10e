package inspect

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
)

func WriteAudit(w io.Writer, asJSON bool, v keyspace.AuditView) error {
	if asJSON {
		recs := []keyspace.AuditJSON{}
		for _, e := range v.Entries {
			j := keyspace.AuditJSON{AuditKey: e.Key, Malformed: e.Malformed, Raw: e.Raw}
			if e.Malformed == "" {
				r := e.Record
				j.AuditRecord = &r
			}
			recs = append(recs, j)
		}
		return cmdutil.WriteJSON(w, struct {
			Namespace string               `json:"namespace"`
			Records   []keyspace.AuditJSON `json:"records"`
		}{v.Namespace, recs})
	}
	if len(v.Entries) == 0 {
		_, err := fmt.Fprintf(w, "no audit records in namespace %s\n", cmdutil.SafeQ(v.Namespace))
		return err
	}
	t := cmdutil.NewTable(w, "TIME", "ACTION", "NAME", "HOLDER", "TOKEN", "RENEWED", "ETCD IDENTITY", "FROM (UNVERIFIED)", "RESULT", "REASON")
	for _, e := range v.Entries {
		if e.Malformed != "" {
			raw := e.Raw
			if len(raw) > 80 {
				raw = raw[:80] + "..."
			}
			t.Row("-", "MALFORMED", "-", "-", "-", "-", "-", "-", "not a record: "+cmdutil.Safe(e.Malformed), "key "+cmdutil.Safe(e.Key)+" value "+cmdutil.SafeQ(raw))
			continue
		}
		r := e.Record
		id := keyspace.AuditIdentity(r)
		if r.IdentitySource == cmdutil.IdentityAuthOff {
			id = "(auth disabled)"
		}
		renewed := "no"
		if r.Renewed {
			renewed = "yes (forced)"
		}
		t.Row(r.Time.UTC().Format(time.RFC3339), cmdutil.Safe(r.Action), cmdutil.Safe(r.Name), cmdutil.Safe(cmdutil.Dash(r.Holder)), fmt.Sprint(r.Token),
			renewed, id, cmdutil.Safe(r.OSUser)+"@"+cmdutil.Safe(r.Host), cmdutil.Safe(r.Result), cmdutil.Safe(r.Reason))
	}
	return t.Flush()
}

func NewCmdAudit(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "List the forced releases (unlock, resign) and release requests of the namespace, oldest first",
		Long: `List the audit trail of the namespace: every force-unlock, forced
resignation and release request, oldest first, with the etcd identity that
did it (the --user name or the client certificate's CN, as etcd
authenticated it), the OS user and host it came from (as that machine said,
unverified), the holder, token and reason. The trail lies under
/<namespace>/audit/v1/, which the namespace's contenders can read but
neither write nor delete; release requests lie under
/<namespace>/audit/v1/request/, which the namespace's requesters may write
too. A value that is not a record is shown as MALFORMED, never skipped.`,
		Example: `  baton audit
  baton audit --namespace payments -o json`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.FanOut(cmd) {
				return auditAcross(g, cmd)
			}
			ctx := cmd.Context()
			cli, octx, done, err := g.OpClient(ctx)
			if err != nil {
				return err
			}
			defer done()
			resp, err := cli.Get(octx, keyspace.AuditPrefix(g.Namespace), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return g.Failed("read audit records", err)
			}
			v := keyspace.AuditView{Namespace: g.Namespace}
			for _, kv := range resp.Kvs {
				v.Entries = append(v.Entries, keyspace.ParseAudit(string(kv.Key), kv.Value))
			}
			keyspace.SortAudit(g.Namespace, v.Entries)
			if old, err := cli.Get(octx, keyspace.LegacyAuditPrefix(g.Namespace), clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil && old.Count > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "baton: %d record(s) under %s, where older versions wrote and contenders could write, are not shown\n",
					old.Count, keyspace.LegacyAuditPrefix(g.Namespace))
			}
			return WriteAudit(cmd.OutOrStdout(), g.JSON(), v)
		},
	}
}
