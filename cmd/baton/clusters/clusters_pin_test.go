package clusters_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/clusters"
	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/router"
)

func writeRouterMap(t *testing.T, name string, m router.Map) string {
	t.Helper()
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The operator's move, step by step, each checked by the tool: the name
// main is repointed from cluster A to a freshly built B.
func TestClustersPinCheckAndCheckMoveCatchARepointedName(t *testing.T) {
	ctx := clitest.TestContext(t)
	a := etcdtest.Start(t, etcdtest.Config{Name: "cli-main-a"})
	b := etcdtest.Start(t, etcdtest.Config{Name: "cli-main-b"})
	mainOn := func(s *etcdtest.Server, epoch uint16) router.Map {
		return router.Map{Clusters: []router.Cluster{{Name: "main", Endpoints: s.Endpoints(), Epoch: epoch, Namespaces: []string{"payments"}}}}
	}

	// 1. pin the map in force.
	code, pinned, errOut := clitest.RunEnv(ctx, nil, "clusters", "pin", writeRouterMap(t, "a.yaml", mainOn(a, 1)))
	if code != cmdutil.ExitOK {
		t.Fatalf("pin: exit %d: %s", code, errOut)
	}
	current := writeFile(t, "current.yaml", pinned)
	cur, err := router.ParseMap([]byte(pinned))
	if err != nil || cur.Clusters[0].ID == "" || cur.Clusters[0].Revision < 1 {
		t.Fatalf("pinned map: %v\n%s", err, pinned)
	}
	if code, out, errOut := clitest.RunEnv(ctx, nil, "clusters", "check", current); code != cmdutil.ExitOK || !strings.Contains(out, "verified") {
		t.Fatalf("check of the pinned map: exit %d\n%s%s", code, out, errOut)
	}

	// 2. The name is repointed at B, pin unchanged: everything refuses, naming main.
	repointed := cur
	repointed.Clusters = []router.Cluster{cur.Clusters[0]}
	repointed.Clusters[0].Endpoints = b.Endpoints()
	next := writeRouterMap(t, "repointed.yaml", repointed)
	code, out, errOut := clitest.RunEnv(ctx, nil, "clusters", "check-move", "--from", current, next)
	if code != cmdutil.ExitError || strings.Contains(out, "safe:") || !strings.Contains(errOut, "cluster main:") ||
		!strings.Contains(errOut, "the map pins "+cur.Clusters[0].ID) {
		t.Fatalf("check-move of a repointed name: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = clitest.RunEnv(ctx, nil, "--clusters", next, "--namespace", "payments", "locks")
	if code != cmdutil.ExitDenied || !strings.Contains(errOut, `cluster "main"`) || !strings.Contains(errOut, "not the one the map pins") {
		t.Fatalf("locks through the repointed map: exit %d: %s", code, errOut)
	}
	// No token is ever handed out from the repointed name: lock refuses
	// before its command runs.
	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errOut = clitest.RunEnv(ctx, nil, "--clusters", next, "--namespace", "payments", "lock", "ledger", "--", "touch", marker)
	if _, err := os.Stat(marker); code != cmdutil.ExitDenied || err == nil || !strings.Contains(errOut, `cluster "main"`) {
		t.Fatalf("lock through the repointed map: exit %d (command ran: %v): %s", code, err == nil, errOut)
	}
	if code, _, errOut := clitest.RunEnv(ctx, nil, "clusters", "check", next); code != cmdutil.ExitError || !strings.Contains(errOut, "cluster main:") {
		t.Fatalf("check of the repointed map: exit %d: %s", code, errOut)
	}

	// 3. Pin B: pin says the epoch must rise; check-move insists.
	code, repinned, errOut := clitest.RunEnv(ctx, nil, "clusters", "pin", next)
	if code != cmdutil.ExitOK || !strings.Contains(errOut, "cluster main: the name now leads to etcd cluster") {
		t.Fatalf("pin of the repointed map: exit %d: %s", code, errOut)
	}
	next = writeFile(t, "repinned.yaml", repinned)
	code, out, errOut = clitest.RunEnv(ctx, nil, "clusters", "check-move", "--from", current, next)
	if code != cmdutil.ExitError || !strings.Contains(errOut, `the name "main" now means another etcd cluster`) {
		t.Fatalf("check-move with B pinned at the same epoch: exit %d\n%s%s", code, out, errOut)
	}

	// 4. Raise the epoch: safe, and the map works.
	fixed := writeFile(t, "fixed.yaml", strings.Replace(repinned, "epoch: 1", "epoch: 2", 1))
	code, out, errOut = clitest.RunEnv(ctx, nil, "-o", "json", "clusters", "check-move", "--from", current, fixed)
	var rep clusters.MoveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != cmdutil.ExitOK || !rep.OK || len(rep.Identities) != 1 || !rep.Identities[0].OK {
		t.Fatalf("check-move after the epoch is raised: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if code, _, errOut := clitest.RunEnv(ctx, nil, "--clusters", fixed, "--namespace", "payments", "locks"); code != cmdutil.ExitOK {
		t.Fatalf("locks through the fixed map: exit %d: %s", code, errOut)
	}
}

func TestClustersPinAndCheckExitCodes(t *testing.T) {
	ctx := clitest.TestContext(t)
	down := writeRouterMap(t, "down.yaml", router.Map{Clusters: []router.Cluster{{Name: "gone", Endpoints: []string{"127.0.0.1:1"}}}})
	for _, args := range [][]string{
		{"--dial-timeout", "300ms", "clusters", "pin", down},
		{"--dial-timeout", "300ms", "clusters", "check-move", "--from", down, writeRouterMap(t, "down-pinned.yaml",
			router.Map{Clusters: []router.Cluster{{Name: "gone", ID: "cdf818194e3a8c32", Endpoints: []string{"127.0.0.1:1"}}}})},
	} {
		if code, out, errOut := clitest.RunEnv(ctx, nil, args...); code != cmdutil.ExitUnavailable || !strings.Contains(errOut, "cluster gone:") {
			t.Errorf("%v: exit %d, want %d naming the cluster\n%s%s", args, code, cmdutil.ExitUnavailable, out, errOut)
		}
	}
	if code, _, errOut := clitest.RunEnv(ctx, nil, "clusters", "check", down); code != cmdutil.ExitError || !strings.Contains(errOut, "cluster gone: the map pins no identity") {
		t.Errorf("check of an unpinned map: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"clusters", "pin"}, {"clusters", "check"}, {"clusters", "pin", filepath.Join(t.TempDir(), "missing.yaml")}} {
		if code, _, errOut := clitest.RunEnv(ctx, nil, args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, cmdutil.ExitUsage, errOut)
		}
	}
}
