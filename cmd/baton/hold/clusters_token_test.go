package hold_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/router"
)

// TestClustersLockAndElectExportTheEpochComposedToken runs a command under
// lock and elect with a cluster map whose cluster has epoch 3: the command
// sees epoch<<47 | the CreateRevision of its key, not the raw revision.
func TestClustersLockAndElectExportTheEpochComposedToken(t *testing.T) {
	ctx := clitest.TestContext(t)
	m := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: clitest.Srv.Endpoints(), Epoch: 3, Namespaces: []string{"payments"}},
	}}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cli := clitest.Srv.Client(t)
	for _, args := range [][]string{
		{"lock", "epoch-lock"},
		{"elect", "epoch-elect", "host-a"},
	} {
		t.Run(args[0], func(t *testing.T) {
			argv := append([]string{"--clusters", path, "--namespace", "payments"}, args...)
			// The key's CreateRevision is read while the command runs.
			argv = append(argv, "--", "sh", "-c", `echo "$BATON_FENCING_TOKEN $BATON_LOCK_KEY"`)
			code, out, errOut := clitest.RunEnv(ctx, nil, argv...)
			if code != cmdutil.ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			tokText, key, ok := strings.Cut(strings.TrimSpace(out), " ")
			if !ok {
				t.Fatalf("command printed %q", out)
			}
			tok, err := fencing.ParseToken(tokText)
			if err != nil {
				t.Fatal(err)
			}
			epoch, rev := router.SplitToken(tok)
			if epoch != 3 {
				t.Fatalf("BATON_FENCING_TOKEN=%s has epoch %d, want 3 (the raw revision was exported)", tokText, epoch)
			}
			// The key is gone (released); its CreateRevision is the revision
			// of the first put of that key, found in the history.
			resp, err := cli.Get(ctx, key, clientv3.WithRev(int64(rev)))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(rev) {
				t.Fatalf("token %s: revision %d is not the CreateRevision of %s (%v)", tokText, rev, key, resp.Kvs)
			}
		})
	}
}
