package admin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rbac"
)

func TestClustersRBACShowReadsEveryCluster(t *testing.T) {
	ctx := clitest.TestContext(t)
	a := etcdtest.Start(t, etcdtest.Config{Name: "a"})
	b := clitest.Srv2(t)
	path := clitest.WriteMap(t, a, b)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	const text = `
namespaces:
  - name: payments
    contenders: [payments-api]
  - name: jobs
    contenders: [jobs-runner]
    observers: [oncall]
`
	if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", path, "rbac", "apply", "-f", policy); code != cmdutil.ExitOK {
		t.Fatalf("rbac apply: exit %d\n%s%s", code, out, errOut)
	}
	// Roles left behind on b by an older map that routed payments there.
	stale := rbac.Policy{Namespaces: []rbac.Namespace{{Name: "payments", Contenders: []string{"old-api"}}}}
	if _, err := rbac.Apply(ctx, b.Client(t), stale); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", path, "rbac", "show")
	if code != cmdutil.ExitOK {
		t.Fatalf("rbac show: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"# cluster a: payments", "# cluster b: jobs", "payments-api", "jobs-runner", "oncall"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rbac show printed no %q (only one cluster read?):\n%s", want, out)
		}
	}
	if strings.Contains(out, "old-api") || !strings.Contains(errOut, "cluster b holds roles of namespace payments, which the map routes to cluster a") {
		t.Fatalf("b's stale payments roles: stdout\n%s\nstderr\n%s", out, errOut)
	}
	if !strings.Contains(errOut, "cluster a: auth is disabled") || !strings.Contains(errOut, "cluster b: auth is disabled") {
		t.Fatalf("no auth warning per cluster: %s", errOut)
	}
	// What it prints is a policy rbac apply --clusters takes back unchanged.
	shown := filepath.Join(t.TempDir(), "shown.yaml")
	if err := os.WriteFile(shown, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", path, "rbac", "apply", "-f", shown); code != cmdutil.ExitOK || out != "cluster a: no changes\ncluster b: no changes\n" {
		t.Fatalf("apply of the shown policy: exit %d\n%s%s", code, out, errOut)
	}

	// a stops: b's share is still shown, a is named, exit 3.
	a.Stop()
	code, out, errOut = clitest.RunEnv(ctx, nil, "--clusters", path, "--dial-timeout", "1s", "-o", "json", "rbac", "show")
	var p rbac.Policy
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != cmdutil.ExitPartial {
		t.Fatalf("rbac show with a down: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if len(p.Namespaces) != 1 || p.Namespaces[0].Name != "jobs" || !strings.Contains(errOut, "cluster a (payments): not answering") {
		t.Fatalf("rbac show with a down: %+v\n%s", p, errOut)
	}
}
