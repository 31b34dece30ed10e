package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/rbac"
)

// The audit trail lives under rbac.AuditPrefix(ns), outside the
// namespace's prefix, so that the namespace's contenders cannot write or
// delete it; only operators (and root) can, and requesters can write the
// records of release requests under rbac.RequestAuditPrefix(ns). Records
// of older versions under /<ns>/v1/audit/, where contenders could write,
// are not shown.

// auditRecord is one forced release.
type auditRecord struct {
	Time        time.Time `json:"time"`
	Action      string    `json:"action"`
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	Key         string    `json:"key"`
	To          string    `json:"to,omitempty"`        // force-transfer: the new leader's key
	ToHolder    string    `json:"to_holder,omitempty"` // force-transfer: its identity
	Holder      string    `json:"holder"`
	Token       int64     `json:"token"`
	Lease       string    `json:"lease"`
	LeaseKeys   []string  `json:"lease_keys,omitempty"`
	TTLLeft     int64     `json:"ttl_left_seconds"`
	Renewed     bool      `json:"renewed"`
	EvenIfAlive bool      `json:"even_if_alive"`
	Reason      string    `json:"reason"`
	// Identity is the etcd user the request was authenticated as: the
	// --user name or the client certificate's CN. Empty when etcd's auth
	// is off (then nobody is authenticated).
	Identity       string `json:"etcd_identity"`
	IdentitySource string `json:"etcd_identity_source"`
	// OSUser and Host are what the operator's machine said, unverified.
	OSUser string `json:"os_user"`
	Host   string `json:"host"`
	Result string `json:"result"`
}

// Sources of an audit record's identity.
const (
	identityPassword    = "user"
	identityCertificate = "certificate"
	identityAuthOff     = "auth disabled"
)

func auditPrefix(ns string) string { return rbac.AuditPrefix(ns) }

// legacyAuditPrefix is where older versions wrote, inside the namespace.
func legacyAuditPrefix(ns string) string { return keys.KindPrefix(ns, keys.Audit) }

// auditOrder is what orders an audit key of namespace ns by time: the key
// below the trail's prefix, less the request records' sub-prefix, so that
// a request record (under rbac.RequestAuditPrefix, or directly under the
// trail where older versions wrote it) falls among the force-unlocks at
// its time. Every record's key below that starts with its UTC time in a
// fixed-width form.
func auditOrder(ns, key string) string {
	rest := strings.TrimPrefix(key, auditPrefix(ns))
	return strings.TrimPrefix(rest, rbac.RequestAuditPrefix(ns)[len(auditPrefix(ns)):])
}

// sortAudit puts the entries of namespace ns in time order (auditOrder),
// the key breaking ties.
func sortAudit(ns string, entries []auditEntry) {
	slices.SortFunc(entries, func(a, b auditEntry) int {
		if c := strings.Compare(auditOrder(ns, a.Key), auditOrder(ns, b.Key)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// auditKey orders records by time; the lease makes it unique.
func auditKey(ns string, t time.Time, lease clientv3.LeaseID) string {
	return auditPrefix(ns) + t.UTC().Format("20060102T150405.000000000Z") + "-" + leaseHex(int64(lease))
}

// etcdIdentity is who etcd authenticated this client as.
type etcdIdentity struct{ Name, Source string }

// identity asks etcd whether auth is on and, if it is, names the user it
// authenticated: the --user name (a token is sent and wins), else the CN
// of the certificate that etcd verified.
func (g *globals) identity(ctx context.Context, cli *clientv3.Client) (etcdIdentity, error) {
	octx, cancel := g.opContext(ctx)
	defer cancel()
	st, err := cli.AuthStatus(octx)
	if err != nil {
		return etcdIdentity{}, err
	}
	if !st.Enabled {
		return etcdIdentity{Source: identityAuthOff}, nil
	}
	if name, _, _ := strings.Cut(g.user, ":"); name != "" {
		return etcdIdentity{Name: name, Source: identityPassword}, nil
	}
	if g.cert != "" {
		cn, err := certCN(g.cert)
		if err != nil {
			return etcdIdentity{}, withCode(ExitUsage, fmt.Errorf("--cert %s: %w", g.cert, err))
		}
		return etcdIdentity{Name: cn, Source: identityCertificate}, nil
	}
	return etcdIdentity{}, nil
}

// certCN is the CN of the first certificate in a PEM file.
func certCN(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return "", fmt.Errorf("no certificate in the file")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return "", err
		}
		return c.Subject.CommonName, nil
	}
}

func whoAmI() (osUser, host string) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	if u, err := user.Current(); err == nil {
		return u.Username, host
	}
	return dash(os.Getenv("USER")), host
}

// auditIdentity is a record's etcd identity as a table shows it, escaped:
// "name (source)", the name alone when the record does not say how etcd
// knew it, "(unknown)" without a name.
func auditIdentity(r auditRecord) string {
	switch {
	case r.Identity == "":
		return "(unknown)"
	case r.IdentitySource == "":
		return safe(r.Identity)
	}
	return safe(r.Identity) + " (" + safe(r.IdentitySource) + ")"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return string(b)
}

// auditEntry is one key of the audit trail: a record, or what could not
// be read as one.
type auditEntry struct {
	Key       string
	Record    auditRecord
	Malformed string // why the value is no record; empty for a record
	Raw       string
}

// auditView is what `baton audit` shows.
type auditView struct {
	Namespace string
	Entries   []auditEntry
}

// auditJSON is a record's fields, flat, with the key it is stored at; or,
// for a malformed one, the key, why, and the raw value.
type auditJSON struct {
	AuditKey  string `json:"audit_key"`
	Malformed string `json:"malformed,omitempty"`
	Raw       string `json:"raw,omitempty"`
	*auditRecord
}

// underRequests says key lies under a namespace's request records
// (rbac.RequestAuditPrefix), which requesters may write.
func underRequests(key string) bool {
	parts := strings.SplitN(key, "/", 6) // "", ns, "audit", "v1", "request", rest
	return len(parts) == 6 && parts[0] == "" && parts[2] == "audit" && parts[3] == "v1" && parts[4] == "request"
}

func parseAudit(key string, value []byte) auditEntry {
	e := auditEntry{Key: key}
	dec := json.NewDecoder(strings.NewReader(string(value)))
	switch err := dec.Decode(&e.Record); {
	case err != nil:
		e.Malformed = err.Error()
	case dec.More():
		e.Malformed = "trailing data after the record"
	case e.Record.Time.IsZero() || e.Record.Action == "" || e.Record.Name == "":
		e.Malformed = "time, action or name missing"
	case underRequests(key) && e.Record.Action != actionRequestRelease:
		// Requesters may write there: nothing else is believed from there.
		e.Malformed = "a " + strconv.Quote(e.Record.Action) + " record where only release requests are written"
	}
	if e.Malformed != "" {
		e.Record = auditRecord{}
		e.Raw = string(value)
	}
	return e
}

func writeAudit(w io.Writer, asJSON bool, v auditView) error {
	if asJSON {
		recs := []auditJSON{}
		for _, e := range v.Entries {
			j := auditJSON{AuditKey: e.Key, Malformed: e.Malformed, Raw: e.Raw}
			if e.Malformed == "" {
				r := e.Record
				j.auditRecord = &r
			}
			recs = append(recs, j)
		}
		return writeJSON(w, struct {
			Namespace string      `json:"namespace"`
			Records   []auditJSON `json:"records"`
		}{v.Namespace, recs})
	}
	if len(v.Entries) == 0 {
		_, err := fmt.Fprintf(w, "no audit records in namespace %s\n", safeQ(v.Namespace))
		return err
	}
	t := newTable(w, "TIME", "ACTION", "NAME", "HOLDER", "TOKEN", "RENEWED", "ETCD IDENTITY", "FROM (UNVERIFIED)", "RESULT", "REASON")
	for _, e := range v.Entries {
		if e.Malformed != "" {
			raw := e.Raw
			if len(raw) > 80 {
				raw = raw[:80] + "..."
			}
			t.row("-", "MALFORMED", "-", "-", "-", "-", "-", "-", "not a record: "+safe(e.Malformed), "key "+safe(e.Key)+" value "+safeQ(raw))
			continue
		}
		r := e.Record
		id := auditIdentity(r)
		if r.IdentitySource == identityAuthOff {
			id = "(auth disabled)"
		}
		renewed := "no"
		if r.Renewed {
			renewed = "yes (forced)"
		}
		t.row(r.Time.UTC().Format(time.RFC3339), safe(r.Action), safe(r.Name), safe(dash(r.Holder)), fmt.Sprint(r.Token),
			renewed, id, safe(r.OSUser)+"@"+safe(r.Host), safe(r.Result), safe(r.Reason))
	}
	return t.flush()
}

func newAuditCmd(g *globals) *cobra.Command {
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
		Args: args(0, 0),
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
			resp, err := cli.Get(octx, auditPrefix(g.namespace), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return g.failed("read audit records", err)
			}
			v := auditView{Namespace: g.namespace}
			for _, kv := range resp.Kvs {
				v.Entries = append(v.Entries, parseAudit(string(kv.Key), kv.Value))
			}
			sortAudit(g.namespace, v.Entries)
			if old, err := cli.Get(octx, legacyAuditPrefix(g.namespace), clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil && old.Count > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "baton: %d record(s) under %s, where older versions wrote and contenders could write, are not shown\n",
					old.Count, legacyAuditPrefix(g.namespace))
			}
			return writeAudit(cmd.OutOrStdout(), g.json(), v)
		},
	}
}
