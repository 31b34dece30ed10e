package version

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/router"
)

func TestVersionShowsEachEndpointsServerVersion(t *testing.T) {
	ctx := clitest.TestContext(t)
	env := map[string]string{"BATON_ENDPOINTS": clitest.Srv.Endpoint()}
	code, out, errOut := clitest.RunEnv(ctx, env, "version")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"etcd client  " + version.Version + " (API " + version.APIVersion + ")", "ENDPOINT", clitest.Srv.Endpoint(), version.Version, "supported"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}

	code, out, _ = clitest.RunEnv(ctx, env, "version", "-o", "json")
	var rep versionReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != cmdutil.ExitOK {
		t.Fatalf("json: exit %d, %v: %s", code, err, out)
	}
	if rep.Client != version.Version || len(rep.Servers) != 1 || rep.Servers[0].Version != version.Version || !rep.Servers[0].Supported {
		t.Fatalf("json: %+v", rep)
	}

	// One endpoint of two down: the other is shown, exit 3.
	code, out, errOut = clitest.RunEnv(ctx, nil, "--endpoints", clitest.Srv.Endpoint()+",127.0.0.1:1", "--dial-timeout", "1s", "version")
	if code != cmdutil.ExitPartial || !strings.Contains(out, version.Version) || fieldsOf(out, "127.0.0.1:1")[1] != "-" ||
		!strings.Contains(out, "not answering") || !strings.Contains(errOut, "1 of 2 endpoints did not answer (127.0.0.1:1)") {
		t.Fatalf("one endpoint down: exit %d\n%s%s", code, out, errOut)
	}
	// None answers: exit 69, the client's version still printed.
	code, out, errOut = clitest.RunEnv(ctx, nil, "--endpoints", "127.0.0.1:1", "--dial-timeout", "1s", "version")
	if code != cmdutil.ExitUnavailable || !strings.Contains(out, "etcd client") || !strings.Contains(errOut, "no endpoint answered") {
		t.Fatalf("unreachable: exit %d\n%s%s", code, out, errOut)
	}
}

func TestVersionWithoutConnectionFlagsConnectsToNothing(t *testing.T) {
	ctx := clitest.TestContext(t)
	code, out, errOut := clitest.RunEnv(ctx, nil, "version")
	if code != cmdutil.ExitOK || strings.Contains(out, "ENDPOINT") || !strings.Contains(out, "etcd client") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = clitest.RunEnv(ctx, nil, "--version")
	if code != cmdutil.ExitOK || !strings.Contains(out, "etcd client "+version.Version) {
		t.Fatalf("--version: exit %d\n%s", code, out)
	}
}

func TestVersionUnderClustersShowsEachCluster(t *testing.T) {
	ctx := clitest.TestContext(t)
	m := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: clitest.Srv.Endpoints(), Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: []string{"127.0.0.1:1"}, Namespaces: []string{"jobs"}},
	}}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", path, "--dial-timeout", "1s", "version")
	if code != cmdutil.ExitPartial || !strings.Contains(out, "CLUSTER") || fieldsOf(out, "a")[1] != clitest.Srv.Endpoint() ||
		fieldsOf(out, "b")[1] != "127.0.0.1:1" {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestServerSupportFollowsTheCompatibilityTable(t *testing.T) {
	for _, tc := range []struct {
		v    string
		ok   bool
		want string
	}{
		{"3.3.27", false, "unsupported"},
		{"3.4.23", true, "3.4: leave --tls-min-version out"},
		{"3.5.35", true, "supported"},
		{"3.6.16", true, "supported"},
		{"3.7.3", true, "supported"},
		{"3.8.0", true, "newer than tested"},
		{"4.0.0", false, "unsupported"},
		{"", false, "unknown version"},
	} {
		ok, verdict := serverSupport(tc.v)
		if ok != tc.ok || !strings.Contains(verdict, tc.want) {
			t.Errorf("serverSupport(%q) = %v, %q; want %v, %q", tc.v, ok, verdict, tc.ok, tc.want)
		}
	}
	err := versionsError([]endpointVersion{{Endpoint: "e1", Version: "3.3.27"}, {Endpoint: "e2", Version: "3.7.3", Supported: true}})
	if cmdutil.ExitCode(err) != cmdutil.ExitError || !strings.Contains(err.Error(), "e1 runs etcd 3.3.27") {
		t.Errorf("an unsupported server: %v (exit %d)", err, cmdutil.ExitCode(err))
	}
}

// fieldsOf returns the fields of the first line of out whose first field
// is first (and two empty ones when there is none).
func fieldsOf(out, first string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == first {
			return f
		}
	}
	return []string{"", ""}
}
