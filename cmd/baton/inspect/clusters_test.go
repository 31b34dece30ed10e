package inspect_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
	"github.com/batonhq/baton/router"
	"github.com/batonhq/baton/semaphore"
)

func holdLock(t *testing.T, srv *etcdtest.Server, ns, name string) *mutex.Lock {
	t.Helper()
	m, err := mutex.New(srv.Client(t), name, mutex.WithNamespace(ns), mutex.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Lock(clitest.TestContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type locksAcrossJSON struct {
	Clusters []cmdutil.ClusterStatus `json:"clusters"`
	Locks    []struct {
		Cluster   string `json:"cluster"`
		Namespace string `json:"namespace"`
		inspect.LockJSON
	} `json:"locks"`
}

func TestClustersLocksFanOutAndReportAClusterDown(t *testing.T) {
	ctx := clitest.TestContext(t)
	a := etcdtest.Start(t, etcdtest.Config{Name: "a"})
	path := clitest.WriteMap(t, a, clitest.Srv)
	pay := holdLock(t, a, "payments", "settle")
	job := holdLock(t, clitest.Srv, "jobs", "nightly-fan")
	env := map[string]string{"BATON_CLUSTERS": path}

	// Both clusters answer: every lock, each with its cluster.
	code, out, errOut := clitest.RunEnv(ctx, env, "locks", "-o", "json")
	if code != cmdutil.ExitOK {
		t.Fatalf("locks: exit %d: %s", code, errOut)
	}
	var v locksAcrossJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, l := range v.Locks {
		got[l.Cluster+"/"+l.Namespace+"/"+l.Name] = l.Key
	}
	if got["a/payments/settle"] != pay.Key() || got["b/jobs/nightly-fan"] != job.Key() {
		t.Fatalf("locks across clusters = %v, want a/payments/settle and b/jobs/nightly-fan", got)
	}

	// A command naming a namespace goes to its cluster only.
	code, out, errOut = clitest.RunEnv(ctx, env, "--namespace", "payments", "locks")
	if code != cmdutil.ExitOK || !strings.Contains(out, "settle") || strings.Contains(out, "nightly-fan") {
		t.Fatalf("locks in payments: exit %d\n%s%s", code, out, errOut)
	}

	// Cluster a stops: b's locks are still listed, a is reported as not
	// answering, with the partial exit code, within the timeouts.
	a.Stop()
	start := time.Now()
	code, out, errOut = clitest.RunEnv(ctx, env, "--dial-timeout", "1s", "--command-timeout", "2s", "locks")
	took := time.Since(start)
	if code != cmdutil.ExitPartial {
		t.Fatalf("locks with a down: exit %d, want %d\n%s%s", code, cmdutil.ExitPartial, out, errOut)
	}
	if !strings.Contains(out, "CLUSTER") || !strings.Contains(out, "nightly-fan") || !strings.Contains(out, "cluster a (payments): not answering") {
		t.Fatalf("locks with a down printed:\n%s", out)
	}
	if !strings.Contains(errOut, "1 of 2 clusters did not answer (a)") {
		t.Fatalf("locks with a down said on stderr: %s", errOut)
	}
	if took > 3*time.Second {
		t.Fatalf("locks with a down took %v, more than the 1s dial and 2s command timeouts", took)
	}
	t.Logf("FIGURE locks with one cluster down answered in %v (dial timeout 1s)", took)

	code, out, _ = clitest.RunEnv(ctx, env, "--dial-timeout", "1s", "locks", "-o", "json")
	v = locksAcrossJSON{}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != cmdutil.ExitPartial {
		t.Fatalf("json with a down: exit %d, %v: %s", code, err, out)
	}
	if len(v.Clusters) != 2 || v.Clusters[0].OK || v.Clusters[0].Error == "" || !v.Clusters[1].OK || len(v.Locks) != 1 {
		t.Fatalf("json with a down: %+v", v)
	}

	// audit too.
	code, out, _ = clitest.RunEnv(ctx, env, "--dial-timeout", "1s", "audit")
	if code != cmdutil.ExitPartial || !strings.Contains(out, "cluster a (payments): not answering") {
		t.Fatalf("audit with a down: exit %d\n%s", code, out)
	}

	// jobs, on b, is still served by its own commands.
	code, out, errOut = clitest.RunEnv(ctx, env, "--namespace", "jobs", "locks")
	if code != cmdutil.ExitOK || !strings.Contains(out, "nightly-fan") {
		t.Fatalf("locks in jobs with a down: exit %d\n%s%s", code, out, errOut)
	}
	// payments' own commands say which cluster is down.
	code, _, errOut = clitest.RunEnv(ctx, env, "--dial-timeout", "1s", "--namespace", "payments", "locks")
	if code != cmdutil.ExitUnavailable || !strings.Contains(errOut, "cluster a:") {
		t.Fatalf("locks in payments with a down: exit %d: %s", code, errOut)
	}
}

func TestClustersRefusesBadUse(t *testing.T) {
	ctx := clitest.TestContext(t)
	path := clitest.WriteMap(t, clitest.Srv, clitest.Srv2(t))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--clusters", path, "--namespace", "reports", "locks"}, `namespace "reports" is listed by none of the clusters`},
		{[]string{"--clusters", path, "--endpoints", "127.0.0.1:1", "locks"}, "--endpoints and --clusters exclude each other"},
		{[]string{"--clusters", filepath.Join(t.TempDir(), "none.yaml"), "locks"}, "--clusters: router: read cluster map"},
	} {
		code, _, errOut := clitest.RunEnv(ctx, nil, tt.args...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %s; want %d with %q", tt.args, code, errOut, cmdutil.ExitUsage, tt.want)
		}
	}
	// A map from the environment gives way to --endpoints on the command
	// line (as the demo's workers pass it).
	code, out, errOut := clitest.RunEnv(ctx, map[string]string{"BATON_CLUSTERS": filepath.Join(t.TempDir(), "none.yaml")},
		"--endpoints", clitest.Srv.Endpoint(), "--namespace", "reports", "locks")
	if code != cmdutil.ExitOK || !strings.Contains(out, `no locks are held in namespace "reports"`) {
		t.Errorf("--endpoints with BATON_CLUSTERS: exit %d\n%s%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("clusters:\n  - name: a\n    endpoint: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = clitest.RunEnv(ctx, nil, "--clusters", bad, "locks")
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, "clusters[0].endpoint: unknown field") || !strings.Contains(errOut, "clusters[0].endpoints: at least one endpoint") {
		t.Errorf("bad map: exit %d, %s", code, errOut)
	}
}

func TestClustersRBACApplyGivesEachClusterItsShare(t *testing.T) {
	ctx := clitest.TestContext(t)
	a, b := clitest.Srv2(t), clitest.Srv2(t)
	path := clitest.WriteMap(t, a, b)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	const text = `
namespaces:
  - name: payments
    contenders: [payments-api]
  - name: jobs
    contenders: [jobs-runner]
`
	if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := clitest.RunEnv(ctx, nil, "--clusters", path, "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK {
		t.Fatalf("rbac apply: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "cluster a: add-role baton:payments:readwrite") || !strings.Contains(out, "cluster b: add-role baton:jobs:readwrite") {
		t.Fatalf("rbac apply printed:\n%s", out)
	}
	for _, tt := range []struct {
		srv  *etcdtest.Server
		want string
	}{{a, "payments"}, {b, "jobs"}} {
		p, err := rbac.Show(ctx, tt.srv.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Namespaces) != 1 || p.Namespaces[0].Name != tt.want {
			t.Errorf("cluster serving %s has the policy %+v", tt.want, p)
		}
	}
	code, out, _ = clitest.RunEnv(ctx, nil, "--clusters", path, "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || out != "cluster a: no changes\ncluster b: no changes\n" {
		t.Fatalf("second rbac apply: exit %d\n%s", code, out)
	}
}

func TestDevClustersStartsClustersAndWritesTheirMap(t *testing.T) {
	ctx, cancel := context.WithCancel(clitest.TestContext(t))
	defer cancel()
	path := filepath.Join(t.TempDir(), "map.yaml")
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- clitest.RunTo(ctx, "", &out, &errOut, "dev", "--clusters", "2", "--map", path,
			"--listen", "127.0.0.1:0", "--listen-peer", "127.0.0.1:0")
	}()
	clitest.WaitFor(t, func() bool {
		select {
		case code := <-done:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "press Ctrl-C")
	})
	if !strings.Contains(out.String(), "export BATON_CLUSTERS="+path) {
		t.Fatalf("dev printed:\n%s", out.String())
	}
	r, err := router.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if cs := r.Clusters(); len(cs) != 2 || cs[0].Namespaces[0] != "payments" || cs[1].Namespaces[0] != "jobs" || r.Default() != "dev-1" {
		t.Fatalf("map: %+v default %q", cs, r.Default())
	}
	// A lock taken through the map shows in the fanned-out listing.
	cli, err := r.Client(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	m, err := mutex.New(cli, "dev-lock", mutex.WithNamespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	code, listing, stderr := clitest.RunEnv(ctx, map[string]string{"BATON_CLUSTERS": path}, "locks")
	if code != cmdutil.ExitOK || !strings.Contains(listing, "dev-2") || !strings.Contains(listing, "dev-lock") {
		t.Fatalf("locks: exit %d\n%s%s", code, listing, stderr)
	}
	_ = m.Close()
	cancel()
	if code := <-done; code != cmdutil.ExitOK {
		t.Fatalf("dev exited %d: %s", code, errOut.String())
	}
	t.Logf("baton dev --clusters 2:\n%s\nbaton locks:\n%s", out.String(), listing)
}

// baton locks across clusters shows what it shows in one namespace: every
// kind, a set's members, running lock-delays and pending release requests,
// each with its cluster and namespace.
func TestClustersLocksShowKindsSetsDelaysAndRequests(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	a := etcdtest.Start(t, etcdtest.Config{Name: "a"})
	env := map[string]string{"BATON_CLUSTERS": clitest.WriteMap(t, a, clitest.Srv)}

	sem, err := semaphore.New(a.Client(t), "across-pool", 3, semaphore.WithNamespace("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Release(ctx) }()
	set, err := mutex.NewSet(clitest.Srv.Client(t), []string{"across-x", "across-y"}, mutex.WithNamespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	sl, err := set.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sl.Unlock(ctx) }()
	if err := mutex.RequestRelease(ctx, clitest.Srv.Client(t), "across-x", "drain \u202e b", mutex.WithNamespace("jobs"), mutex.WithIdentity("op-2")); err != nil {
		t.Fatal(err)
	}
	clitest.LockDelayScene(t, "jobs", "across-lost", 4*time.Second)

	code, out, errOut := clitest.RunEnv(ctx, env, "locks", "across-")
	if code != cmdutil.ExitOK {
		t.Fatalf("locks: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"semaphore", "across-pool",
		`cluster b, namespace jobs: token ` + sl.Token().String() + ` holds 2 locks as one set: "across-x", "across-y"`,
		`cluster b, namespace jobs: lock-delay on mutex "across-lost": `,
		`cluster b, namespace jobs: release requested of mutex "across-x" (token ` + sl.Token().String() + `) by "op-2" at `,
		`: "drain \u202e b"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("locks across clusters lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\u202e") {
		t.Errorf("an unescaped format character in:\n%s", out)
	}

	code, jout, errOut := clitest.RunEnv(ctx, env, "locks", "across-", "-o", "json")
	var v struct {
		Locks []struct {
			Cluster string `json:"cluster"`
			inspect.LockJSON
		} `json:"locks"`
		Delays []struct {
			Cluster   string `json:"cluster"`
			Namespace string `json:"namespace"`
			inspect.DelayJSON
		} `json:"lock_delays"`
	}
	if err := json.Unmarshal([]byte(jout), &v); code != cmdutil.ExitOK || err != nil {
		t.Fatalf("locks -o json: exit %d, %v\n%s%s", code, err, jout, errOut)
	}
	kinds, requested := map[string]string{}, false
	for _, l := range v.Locks {
		kinds[l.Cluster+"/"+l.Name] = l.Kind
		requested = requested || (l.Name == "across-x" && l.Release != nil && l.Release.By == "op-2" && len(l.Set) == 2)
	}
	if kinds["a/across-pool"] != "semaphore" || kinds["b/across-x"] != "mutex" || !requested {
		t.Errorf("json locks: kinds %v, request on across-x with its set %v\n%s", kinds, requested, jout)
	}
	if len(v.Delays) != 1 || v.Delays[0].Cluster != "b" || v.Delays[0].Namespace != "jobs" || v.Delays[0].Name != "across-lost" {
		t.Errorf("json lock_delays: %+v", v.Delays)
	}
}
