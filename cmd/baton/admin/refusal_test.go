package admin_test

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

// A certificate etcd accepts, for a user no role grants the namespace:
// the refusal names the user, the permission and the key, and what to run,
// and does not blame the certificate.
func TestPermissionRefusalNamesUserPermissionAndKey(t *testing.T) {
	as := clitest.StartSecureDev(t, "payments-api,nobody", "namespaces:\n  - name: payments\n    contenders: [payments-api]\n")
	code, _, errOut := as("nobody", "--namespace", "payments", "locks")
	if code != cmdutil.ExitDenied {
		t.Fatalf("exit %d, want %d: %s", code, cmdutil.ExitDenied, errOut)
	}
	for _, want := range []string{`user "nobody" lacks read permission on key "/payments/v1/"`, "baton rbac show",
		`accepted the client certificate`, `(CN "nobody")`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("refusal does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "refused the client certificate") {
		t.Errorf("refusal blames the certificate etcd accepted:\n%s", errOut)
	}
	// A contender in another namespace: the same, for that namespace.
	code, _, errOut = as("payments-api", "--namespace", "jobs", "locks")
	if code != cmdutil.ExitDenied || !strings.Contains(errOut, `user "payments-api" lacks read permission on key "/jobs/v1/"`) {
		t.Fatalf("contender in another namespace: exit %d: %s", code, errOut)
	}
}
