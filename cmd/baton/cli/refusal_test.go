package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/rbac"
)

// startSecureDev runs `baton dev` with TLS, client-certificate auth and the
// policy given, with certificates for users, and returns how to run baton
// as one of them.
func startSecureDev(t *testing.T, users, policy string) func(user string, args ...string) (int, string, string) {
	t.Helper()
	ctx := testContext(t)
	as := startSecureDevCtx(t, users, policy)
	return func(user string, args ...string) (int, string, string) { return as(ctx, user, args...) }
}

// startSecureDevCtx is startSecureDev whose commands run with a context of
// the caller's (to stop a long-running one).
func startSecureDevCtx(t *testing.T, users, policy string) func(ctx context.Context, user string, args ...string) (int, string, string) {
	t.Helper()
	ctx := testContext(t)
	dir := t.TempDir()
	if code, _, errOut := run(ctx, t, "", "certs", "init", "--dir", dir, "--users", users); code != ExitOK {
		t.Fatalf("certs init: %s", errOut)
	}
	listen, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	devCtx, stop := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runTo(devCtx, "", &out, &errOut, "dev", "--listen", listen, "--listen-peer", peer, "--tls", dir, "--auth", "--policy", writePolicy(t, policy))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("dev did not stop")
		}
	})
	waitFor(t, func() bool {
		select {
		case code := <-done:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "press Ctrl-C")
	})
	return func(ctx context.Context, user string, args ...string) (int, string, string) {
		f := rbac.ClientFiles(dir, user)
		flags := []string{"--endpoints", "https://" + listen, "--cacert", f.CA}
		if user != "" {
			flags = append(flags, "--cert", f.Cert, "--key", f.Key)
		}
		return run(ctx, t, "", append(flags, args...)...)
	}
}

// A certificate etcd accepts, for a user no role grants the namespace:
// the refusal names the user, the permission and the key, and what to run,
// and does not blame the certificate.
func TestPermissionRefusalNamesUserPermissionAndKey(t *testing.T) {
	as := startSecureDev(t, "payments-api,nobody", "namespaces:\n  - name: payments\n    contenders: [payments-api]\n")
	code, _, errOut := as("nobody", "--namespace", "payments", "locks")
	if code != ExitDenied {
		t.Fatalf("exit %d, want %d: %s", code, ExitDenied, errOut)
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
	if code != ExitDenied || !strings.Contains(errOut, `user "payments-api" lacks read permission on key "/jobs/v1/"`) {
		t.Fatalf("contender in another namespace: exit %d: %s", code, errOut)
	}
}
