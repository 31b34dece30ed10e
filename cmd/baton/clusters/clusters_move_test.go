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
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestClustersCheckMoveRefusesAnEpochThatDoesNotGrow(t *testing.T) {
	ctx := clitest.TestContext(t)
	const head = `
clusters:
  - name: a
    endpoints: [127.0.0.1:1]
    epoch: 1
`
	before := writeFile(t, "before.yaml", head+`    namespaces: [payments]
  - name: b
    endpoints: [127.0.0.1:2]
    namespaces: [jobs]
`)
	mk := func(epoch string) string {
		return writeFile(t, "after.yaml", head+`  - name: b
    endpoints: [127.0.0.1:2]
    epoch: `+epoch+`
    namespaces: [jobs, payments]
`)
	}

	// payments a (1) -> b (2): safe.
	code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", before, "clusters", "check-move", "--offline", mk("2"))
	if code != cmdutil.ExitOK || !strings.Contains(out, "payments   a (epoch 1)  b (epoch 2)  moves") || !strings.Contains(out, "safe:") {
		t.Fatalf("safe move: exit %d\n%s%s", code, out, errOut)
	}
	// payments a (1) -> b (1): refused, with the offence named.
	code, out, errOut = clitest.RunEnv(ctx, map[string]string{"BATON_CLUSTERS": before}, "clusters", "check-move", "--offline", mk("1"))
	if code != cmdutil.ExitError || strings.Contains(out, "safe:") ||
		!strings.Contains(errOut, `namespace "payments" moves from cluster "a" (epoch 1) to cluster "b" (epoch 1)`) {
		t.Fatalf("unsafe move: exit %d\n%s%s", code, out, errOut)
	}
	// The same in JSON, with --from.
	code, out, _ = clitest.RunEnv(ctx, nil, "-o", "json", "clusters", "check-move", "--offline", "--from", before, mk("1"))
	var rep clusters.MoveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != cmdutil.ExitError {
		t.Fatalf("json: exit %d, %v: %s", code, err, out)
	}
	if rep.OK || len(rep.Problems) != 1 || len(rep.Rows) != 2 || rep.Rows[1].Namespace != "payments" || rep.Rows[1].Change != "moves" {
		t.Fatalf("json report: %+v", rep)
	}
	// Bad use: no map in force, an unreadable or invalid map.
	for _, args := range [][]string{
		{"clusters", "check-move", "--offline", mk("2")},
		{"clusters", "check-move", "--from", before, filepath.Join(t.TempDir(), "missing.yaml")},
		{"clusters", "check-move", "--from", before, writeFile(t, "bad.yaml", "clusters: []\nextra: 1\n")},
		{"clusters", "check-move", "--from", before},
	} {
		if code, _, errOut := clitest.RunEnv(ctx, nil, args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, cmdutil.ExitUsage, errOut)
		}
	}
}
