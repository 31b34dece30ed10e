package keyspace

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/rbac"
)

// The audit trail lives under rbac.AuditPrefix(ns), outside the
// namespace's prefix, so that the namespace's contenders cannot write or
// delete it; only operators (and root) can, and requesters can write the
// records of release requests under rbac.RequestAuditPrefix(ns). Records
// of older versions under /<ns>/v1/audit/, where contenders could write,
// are not shown.

// AuditRecord is one forced release.
type AuditRecord struct {
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

func AuditPrefix(ns string) string { return rbac.AuditPrefix(ns) }

// LegacyAuditPrefix is where older versions wrote, inside the namespace.
func LegacyAuditPrefix(ns string) string { return keys.KindPrefix(ns, keys.Audit) }

// AuditOrder is what orders an audit key of namespace ns by time: the key
// below the trail's prefix, less the request records' sub-prefix, so that
// a request record (under rbac.RequestAuditPrefix, or directly under the
// trail where older versions wrote it) falls among the force-unlocks at
// its time. Every record's key below that starts with its UTC time in a
// fixed-width form.
func AuditOrder(ns, key string) string {
	rest := strings.TrimPrefix(key, AuditPrefix(ns))
	return strings.TrimPrefix(rest, rbac.RequestAuditPrefix(ns)[len(AuditPrefix(ns)):])
}

// SortAudit puts the entries of namespace ns in time order (auditOrder),
// the key breaking ties.
func SortAudit(ns string, entries []AuditEntry) {
	slices.SortFunc(entries, func(a, b AuditEntry) int {
		if c := strings.Compare(AuditOrder(ns, a.Key), AuditOrder(ns, b.Key)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// AuditKey orders records by time; the lease makes it unique.
func AuditKey(ns string, t time.Time, lease clientv3.LeaseID) string {
	return AuditPrefix(ns) + t.UTC().Format("20060102T150405.000000000Z") + "-" + cmdutil.LeaseHex(int64(lease))
}

// AuditIdentity is a record's etcd identity as a table shows it, escaped:
// "name (source)", the name alone when the record does not say how etcd
// knew it, "(unknown)" without a name.
func AuditIdentity(r AuditRecord) string {
	switch {
	case r.Identity == "":
		return "(unknown)"
	case r.IdentitySource == "":
		return cmdutil.Safe(r.Identity)
	}
	return cmdutil.Safe(r.Identity) + " (" + cmdutil.Safe(r.IdentitySource) + ")"
}

func MustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return string(b)
}

// AuditEntry is one key of the audit trail: a record, or what could not
// be read as one.
type AuditEntry struct {
	Key       string
	Record    AuditRecord
	Malformed string // why the value is no record; empty for a record
	Raw       string
}

// AuditView is what `baton audit` shows.
type AuditView struct {
	Namespace string
	Entries   []AuditEntry
}

// AuditJSON is a record's fields, flat, with the key it is stored at; or,
// for a malformed one, the key, why, and the raw value.
type AuditJSON struct {
	AuditKey  string `json:"audit_key"`
	Malformed string `json:"malformed,omitempty"`
	Raw       string `json:"raw,omitempty"`
	*AuditRecord
}

// underRequests says key lies under a namespace's request records
// (rbac.RequestAuditPrefix), which requesters may write.
func underRequests(key string) bool {
	parts := strings.SplitN(key, "/", 6) // "", ns, "audit", "v1", "request", rest
	return len(parts) == 6 && parts[0] == "" && parts[2] == "audit" && parts[3] == "v1" && parts[4] == "request"
}

func ParseAudit(key string, value []byte) AuditEntry {
	e := AuditEntry{Key: key}
	dec := json.NewDecoder(strings.NewReader(string(value)))
	switch err := dec.Decode(&e.Record); {
	case err != nil:
		e.Malformed = err.Error()
	case dec.More():
		e.Malformed = "trailing data after the record"
	case e.Record.Time.IsZero() || e.Record.Action == "" || e.Record.Name == "":
		e.Malformed = "time, action or name missing"
	case underRequests(key) && e.Record.Action != ActionRequestRelease:
		// Requesters may write there: nothing else is believed from there.
		e.Malformed = "a " + strconv.Quote(e.Record.Action) + " record where only release requests are written"
	}
	if e.Malformed != "" {
		e.Record = AuditRecord{}
		e.Raw = string(value)
	}
	return e
}

const ActionRequestRelease = "request-release"
