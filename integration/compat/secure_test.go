package compat_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/integration/compat"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// runBaton runs the baton CLI and returns its output; a non-zero exit
// fails the test.
func runBaton(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(baton(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("baton %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// serverFlags are the TLS flags of docs/security.md step 2 with the file
// names `baton certs init` writes; --tls-min-version only where etcd has it
// (3.5 and later).
func serverFlags(b compat.Binaries, pki string) []string {
	f := []string{
		"--cert-file", filepath.Join(pki, "server.crt"), "--key-file", filepath.Join(pki, "server.key"),
		"--trusted-ca-file", filepath.Join(pki, "ca.crt"), "--client-cert-auth",
		"--peer-cert-file", filepath.Join(pki, "server.crt"), "--peer-key-file", filepath.Join(pki, "server.key"),
		"--peer-trusted-ca-file", filepath.Join(pki, "ca.crt"), "--peer-client-cert-auth",
	}
	if b.AtLeast("3.5") {
		f = append(f, "--tls-min-version", "TLS1.2")
	}
	return f
}

// TestTLSAuthAndRBACMatrix sets up a TLS cluster with client-certificate
// auth using baton's own commands as docs/security.md says (certs init,
// auth enable, rbac apply, rbac show), then checks who may do what: a
// contender locks, an observer reads but cannot lock, a user without a
// role cannot read, a client without a certificate or with one of another
// CA is refused.
func TestTLSAuthAndRBACMatrix(t *testing.T) {
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		timed(t, b.Minor)
		pki, foreign := filepath.Join(t.TempDir(), "pki"), filepath.Join(t.TempDir(), "foreign")
		runBaton(t, nil, "certs", "init", "--dir", pki, "--hosts", "localhost,127.0.0.1", "--users", "root,payments-api,oncall,nobody")
		runBaton(t, nil, "certs", "init", "--dir", foreign, "--users", "payments-api")
		rootTLS, err := rbac.ClientFiles(pki, "root").ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		c := compat.Start(t, b, compat.Options{TLS: true, Flags: serverFlags(b, pki), ClientTLS: rootTLS})

		env := []string{"BATON_ENDPOINTS=" + strings.Join(c.Endpoints(), ",")}
		asRoot := []string{"--cacert", filepath.Join(pki, "ca.crt"), "--cert", filepath.Join(pki, "client-root.crt"), "--key", filepath.Join(pki, "client-root.key")}
		out, _ := runBaton(t, env, append([]string{"auth", "enable"}, asRoot...)...)
		if !strings.Contains(out, "enable-auth") {
			t.Fatalf("auth enable printed %q, want enable-auth", out)
		}
		if out, _ := runBaton(t, env, append([]string{"auth", "enable"}, asRoot...)...); strings.TrimSpace(out) != "auth already enabled" {
			t.Fatalf("second auth enable printed %q", out)
		}
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(policy, []byte("namespaces:\n  - name: payments\n    contenders: [payments-api]\n    observers: [oncall]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		runBaton(t, env, append([]string{"rbac", "apply", "-f", policy, "--dry-run"}, asRoot...)...)
		out, errOut := runBaton(t, env, append([]string{"rbac", "apply", "-f", policy}, asRoot...)...)
		if !strings.Contains(out, "grant-role baton:payments:readwrite to user payments-api") || strings.Contains(errOut, "warning") {
			t.Fatalf("rbac apply:\n%s%s", out, errOut)
		}
		out, errOut = runBaton(t, env, append([]string{"rbac", "show"}, asRoot...)...)
		if !strings.Contains(out, "payments-api") || strings.Contains(errOut, "warning") {
			t.Fatalf("rbac show:\n%s%s", out, errOut)
		}

		ctx := ctxFor(t, 60*time.Second)
		client := func(user string) *clientv3.Client {
			cfg, err := rbac.ClientFiles(pki, user).ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			return cli
		}
		newMutex := func(user string) *mutex.Mutex {
			m, err := mutex.New(client(user), "settlement", mutex.WithNamespace("payments"), mutex.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			return m
		}
		// The contender locks.
		cm := newMutex("payments-api")
		l, err := cm.Lock(ctx)
		if err != nil {
			t.Fatalf("contender Lock: %v", err)
		}
		// The observer sees the holder but cannot lock.
		om := newMutex("oncall")
		if h, err := om.Holder(ctx); err != nil || h.Key != l.Key() {
			t.Errorf("observer Holder = %+v, %v; want the contender's key", h, err)
		}
		if _, err := om.TryLock(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("observer TryLock: %v, want permission denied", err)
		}
		// A user without a role sees nothing.
		nm := newMutex("nobody")
		if _, err := nm.Holder(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("no-role Holder: %v, want permission denied", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// No certificate, and another CA's: refused in the TLS handshake.
		pool := x509.NewCertPool()
		caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(caPEM)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := rbac.ProbeTLS(pctx, c.Endpoints()[0], &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}); !errors.Is(err, rbac.ErrTLSRefused) {
			t.Errorf("no client certificate: %v, want ErrTLSRefused", err)
		}
		foreignCert, err := tls.LoadX509KeyPair(filepath.Join(foreign, "client-payments-api.crt"), filepath.Join(foreign, "client-payments-api.key"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rbac.ProbeTLS(pctx, c.Endpoints()[0], &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{foreignCert}, MinVersion: tls.VersionTLS12}); !errors.Is(err, rbac.ErrTLSRefused) {
			t.Errorf("another CA's certificate: %v, want ErrTLSRefused", err)
		}
		figure(t, b.Minor, "certs init, auth enable (twice), rbac apply --dry-run, apply, show as docs/security.md; contender locks, observer reads only, no role denied, no cert and foreign CA refused")
	})
}
