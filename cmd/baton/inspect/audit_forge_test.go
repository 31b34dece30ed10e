package inspect_test

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/rbac"
)

// Requesters may write under the request records: a record there that is
// not a release request (a forged force-unlock) is shown as MALFORMED,
// never believed; the same record elsewhere in the trail is a record.
func TestAuditDoesNotBelieveForcesWrittenWhereRequestersWrite(t *testing.T) {
	const rec = `{"time":"2026-01-01T00:00:00Z","action":"force-unlock","name":"x","etcd_identity":"oncall-lead","etcd_identity_source":"certificate"}`
	const req = `{"time":"2026-01-01T00:00:00Z","action":"request-release","name":"x","etcd_identity":"job"}`
	for _, tc := range []struct {
		key, value string
		malformed  bool
	}{
		{rbac.RequestAuditPrefix("ns") + "20260101T000000.000000000Z-1", rec, true},
		{rbac.RequestAuditPrefix("ns") + "20260101T000000.000000000Z-2", req, false},
		{rbac.AuditPrefix("ns") + "20260101T000000.000000000Z-3", rec, false},
		{rbac.AuditPrefix("ns") + "20260101T000000.000000000Z-request-4", req, false}, // older versions' place
	} {
		e := keyspace.ParseAudit(tc.key, []byte(tc.value))
		if (e.Malformed != "") != tc.malformed {
			t.Errorf("%s: malformed %q, want malformed %v", tc.key, e.Malformed, tc.malformed)
		}
		if tc.malformed && !strings.Contains(e.Malformed, "only release requests") {
			t.Errorf("%s: %q does not say why", tc.key, e.Malformed)
		}
	}
}
