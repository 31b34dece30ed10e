package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/admin"
	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rbac"
)

func TestCertsInitWritesCAServerAndClients(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := filepath.Join(t.TempDir(), "pki")
	code, out, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--hosts", "localhost,127.0.0.1", "--users", "root,payments-api", "--key-type", "ed25519")
	if code != cmdutil.ExitOK {
		t.Fatalf("certs init exited %d: %s", code, errOut)
	}
	if !strings.Contains(out, "(created)") || !strings.Contains(out, "client-payments-api.crt (CN payments-api)") {
		t.Fatalf("output:\n%s", out)
	}
	for _, f := range []string{"ca.key", "server.key", "client-root.key", "client-payments-api.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if _, err := rbac.ClientFiles(dir, "payments-api").ClientConfig(); err != nil {
		t.Fatalf("written client certificate unusable: %v", err)
	}

	code, out, errOut = clitest.Run(ctx, t, "", "-o", "json", "certs", "init", "--dir", dir, "--users", "oncall")
	if code != cmdutil.ExitOK {
		t.Fatalf("second certs init exited %d: %s", code, errOut)
	}
	var rep admin.CertsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if rep.CACreated || rep.Clients["oncall"].Cert != filepath.Join(dir, "client-oncall.crt") {
		t.Fatalf("second run: %+v", rep)
	}
}

func TestCertsInitRejectsBadArguments(t *testing.T) {
	ctx := clitest.TestContext(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"certs", "init"}, "--dir is required"},
		{"bad user", []string{"certs", "init", "--dir", t.TempDir(), "--users", "a b"}, `user name "a b"`},
		{"bad host", []string{"certs", "init", "--dir", t.TempDir(), "--hosts", "exa mple"}, `host "exa mple"`},
		{"bad key type", []string{"certs", "init", "--dir", t.TempDir(), "--key-type", "rsa"}, "KeyType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := clitest.Run(ctx, t, "", tc.args...)
			if code != cmdutil.ExitUsage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, errOut, cmdutil.ExitUsage, tc.want)
			}
		})
	}
}

// runSuffix makes names unique to one run of a test, so that the test
// passes again on the same etcd (go test -count=2).
func runSuffix() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

func TestRBACApplyIsIdempotentAndShowReadsItBack(t *testing.T) {
	ctx := clitest.TestContext(t)
	// Names of its own per run: the roles it applies stay in etcd.
	u := runSuffix()
	policy := clitest.WritePolicy(t, fmt.Sprintf("namespaces:\n  - name: cli-rbac-%s\n    contenders: [cli-app-%s]\n    requesters: [cli-job-%s]\n    observers: [cli-ops-%s]\n", u, u, u, u))

	code, out, errOut := clitest.Run(ctx, t, "", "rbac", "apply", "-f", policy, "--dry-run")
	if code != cmdutil.ExitOK || !strings.Contains(out, fmt.Sprintf("would grant-role baton:cli-rbac-%s:readwrite to user cli-app-%s", u, u)) {
		t.Fatalf("dry run exited %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = clitest.Run(ctx, t, "", "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || len(strings.Split(strings.TrimSpace(out), "\n")) != 19 {
		t.Fatalf("apply exited %d, want 19 changes:\n%s%s", code, out, errOut)
	}
	code, out, errOut = clitest.Run(ctx, t, "", "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || strings.TrimSpace(out) != "no changes" {
		t.Fatalf("second apply exited %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = clitest.Run(ctx, t, "", "-o", "json", "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || !strings.Contains(out, `"changes": []`) {
		t.Fatalf("json apply exited %d:\n%s%s", code, out, errOut)
	}

	code, out, errOut = clitest.Run(ctx, t, "", "rbac", "show")
	if code != cmdutil.ExitOK {
		t.Fatalf("show exited %d: %s", code, errOut)
	}
	shown, err := rbac.Parse([]byte(out))
	if err != nil {
		t.Fatalf("show's output does not parse: %v\n%s", err, out)
	}
	found := false
	for _, ns := range shown.Namespaces {
		if ns.Name == "cli-rbac-"+u {
			found = len(ns.Contenders) == 1 && ns.Contenders[0] == "cli-app-"+u && len(ns.Observers) == 1 && ns.Observers[0] == "cli-ops-"+u &&
				len(ns.Requesters) == 1 && ns.Requesters[0] == "cli-job-"+u
		}
	}
	if !found {
		t.Fatalf("show misses the policy:\n%s", out)
	}
}

func TestRBACApplyRejectsABadFile(t *testing.T) {
	ctx := clitest.TestContext(t)
	bad := clitest.WritePolicy(t, "namespaces:\n  - name: cli-bad\n    contender: [x]\n")
	code, _, errOut := clitest.Run(ctx, t, "", "rbac", "apply", "-f", bad)
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, `unknown field "contender"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := clitest.Run(ctx, t, "", "rbac", "apply"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "-f is required") {
		t.Fatalf("no file: exit %d, stderr %q", code, errOut)
	}
}

// TestDevServesTLSWithAuthAndPolicy runs `baton dev --tls DIR --auth
// --policy FILE` and uses it as root, as a contender, and without a
// certificate.
func TestDevServesTLSWithAuthAndPolicy(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := t.TempDir()
	if code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--users", "payments-api"); code != cmdutil.ExitOK {
		t.Fatalf("certs init: %s", errOut)
	}
	policy := clitest.WritePolicy(t, "namespaces:\n  - name: payments\n    contenders: [payments-api]\n  - name: jobs\n")
	listen, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	devCtx, stop := context.WithCancel(context.Background())
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- clitest.RunTo(devCtx, "", &out, &errOut, "dev", "--listen", listen, "--listen-peer", peer, "--tls", dir, "--auth", "--policy", policy)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("dev did not stop")
		}
	})
	clitest.WaitFor(t, func() bool {
		select {
		case code := <-done:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "press Ctrl-C")
	})
	if !strings.Contains(out.String(), "etcd serving at https://"+listen) || !strings.Contains(out.String(), "applied (") {
		t.Fatalf("dev output:\n%s", out.String())
	}

	endpoint := "https://" + listen
	as := func(user string, args ...string) (int, string, string) {
		f := rbac.ClientFiles(dir, user)
		flags := []string{"--endpoints", endpoint, "--cacert", f.CA}
		if user != "" {
			flags = append(flags, "--cert", f.Cert, "--key", f.Key)
		}
		return clitest.Run(ctx, t, "", append(flags, args...)...)
	}
	if code, out, errOut := as("root", "auth", "enable"); code != cmdutil.ExitOK || strings.TrimSpace(out) != "auth already enabled" {
		t.Fatalf("auth enable again: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := as("root", "rbac", "apply", "-f", policy); code != cmdutil.ExitOK || strings.TrimSpace(out) != "no changes" {
		t.Fatalf("rbac apply again: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := as("root", "rbac", "show"); code != cmdutil.ExitOK || !strings.Contains(out, "payments-api") {
		t.Fatalf("rbac show: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := as("payments-api", "--namespace", "payments", "locks"); code != cmdutil.ExitOK {
		t.Fatalf("contender lists its namespace: %d %s", code, errOut)
	}
	if code, _, errOut := as("payments-api", "--namespace", "jobs", "locks"); code != cmdutil.ExitDenied || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("contender lists another namespace: %d %s", code, errOut)
	}
	if code, _, errOut := as("payments-api", "rbac", "show"); code != cmdutil.ExitDenied || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("contender shows the policy: %d %s", code, errOut)
	}
	code, _, refusal := as("", "--namespace", "payments", "--dial-timeout", "500ms", "locks")
	if code != cmdutil.ExitDenied {
		t.Fatalf("a client without a certificate: exit %d, want %d (refused, not unreachable): %s", code, cmdutil.ExitDenied, refusal)
	}
	// The operator is told why, not only that a deadline passed.
	if !strings.Contains(refusal, "certificate") {
		t.Fatalf("refusal does not say why: %s", refusal)
	}
}

func TestRBACApplyAndShowWarnWhenAuthIsOff(t *testing.T) {
	ctx := clitest.TestContext(t)
	policy := clitest.WritePolicy(t, "namespaces:\n  - name: cli-authoff\n    contenders: [cli-authoff-app]\n")
	const warning = "warning: auth is disabled on this etcd: these roles are not enforced"
	code, out, errOut := clitest.Run(ctx, t, "", "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || !strings.Contains(errOut, warning) {
		t.Fatalf("apply exited %d, stderr %q, want the warning\n%s", code, errOut, out)
	}
	code, out, errOut = clitest.Run(ctx, t, "", "-o", "json", "rbac", "apply", "-f", policy)
	if code != cmdutil.ExitOK || !strings.Contains(out, `"auth_enabled": false`) || !strings.Contains(errOut, warning) {
		t.Fatalf("json apply exited %d:\n%s%s", code, out, errOut)
	}
	code, _, errOut = clitest.Run(ctx, t, "", "rbac", "show")
	if code != cmdutil.ExitOK || !strings.Contains(errOut, warning) {
		t.Fatalf("show exited %d, stderr %q, want the warning", code, errOut)
	}
}

// TestRBACApplyBoundsEachRequestNotTheWhole applies about 600 changes with
// a --command-timeout far below the time they take together.
func TestRBACApplyBoundsEachRequestNotTheWhole(t *testing.T) {
	ctx := clitest.TestContext(t)
	var b strings.Builder
	b.WriteString("namespaces:\n")
	const n = 40
	u := runSuffix() // the roles it applies stay in etcd
	for i := range n {
		fmt.Fprintf(&b, "  - name: cli-bulk-%s-%03d\n    contenders: [cli-bulk-app-%s]\n    observers: [cli-bulk-ops-%s]\n", u, i, u, u)
	}
	policy := clitest.WritePolicy(t, b.String())
	start := time.Now()
	code, out, errOut := clitest.Run(ctx, t, "", "--command-timeout", "1s", "rbac", "apply", "-f", policy)
	took := time.Since(start)
	if code != cmdutil.ExitOK {
		t.Fatalf("apply exited %d after %v: %s", code, took, errOut)
	}
	// 15: four roles, each also reading the audit trail (the request role
	// writing its request records), two users and their grants.
	if lines := strings.Count(out, "\n"); lines != 15*n+2 {
		t.Fatalf("%d changes printed, want %d", lines, 15*n+2)
	}
	if took < time.Second {
		t.Logf("apply took %v: too fast to show the bound", took)
	}
}

func TestCertsInitChecksEveryUserBeforeWritingAnything(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := filepath.Join(t.TempDir(), "pki")
	code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--users", "ok,bad user,also bad")
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, `"bad user"`) || !strings.Contains(errOut, `"also bad"`) {
		t.Fatalf("exit %d, stderr %q; want a usage error naming both bad users", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("certs init wrote %s before refusing: %v", dir, err)
	}
}

func TestCertsInitChecksEveryHostBeforeWritingAnything(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := filepath.Join(t.TempDir(), "pki")
	code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--hosts", "localhost,exa mple,a..b")
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, `"exa mple"`) || !strings.Contains(errOut, `"a..b"`) {
		t.Fatalf("exit %d, stderr %q; want a usage error naming both bad hosts", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("certs init wrote %s before refusing: %v", dir, err)
	}
	code, _, errOut = clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--hosts", "exa mple", "--key-type", "rsa")
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, `"exa mple"`) || !strings.Contains(errOut, "KeyType") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming the host and the key type", code, errOut)
	}
}

func TestCertsInitSaysItReusesTheCA(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := filepath.Join(t.TempDir(), "pki")
	if code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir); code != cmdutil.ExitOK || strings.Contains(errOut, "reusing") {
		t.Fatalf("first init: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir)
	if code != cmdutil.ExitOK || !strings.Contains(errOut, "reusing the existing CA") {
		t.Fatalf("second init: exit %d, stderr %q; want it to say it reuses the CA", code, errOut)
	}
}

func TestCertsInitRefusesAWritableDirectoryUnlessForced(t *testing.T) {
	ctx := clitest.TestContext(t)
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir)
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, "group or others can write it") {
		t.Fatalf("exit %d, stderr %q; want a refusal", code, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("wrote %d files before refusing", len(entries))
	}
	if code, _, errOut := clitest.Run(ctx, t, "", "certs", "init", "--dir", dir, "--force"); code != cmdutil.ExitOK {
		t.Fatalf("--force: exit %d, stderr %q", code, errOut)
	}
}
