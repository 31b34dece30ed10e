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

// TestTLSAuthAndRBACMatrix runs docs/security.md: every command of its
// shell blocks, in order, with only the substitutions listed at docPKI
// (addresses, the directory, the binaries of the version under test), its
// etcd line starting a 3-member cluster. Then it checks who may do what on
// what the doc set up: a contender locks, an observer reads but cannot
// lock, a user without a role (or with one on another namespace only)
// cannot read, a client without a certificate or with one of another CA
// is refused.
func TestTLSAuthAndRBACMatrix(t *testing.T) {
	steps, err := compat.SecuritySteps(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		timed(t, b.Minor)
		d := &docRun{t: t, b: b, dir: t.TempDir(), env: map[string]string{}}
		for _, s := range steps {
			d.run(s)
		}
		if d.c == nil {
			t.Fatal("docs/security.md started no etcd")
		}
		c, pki := d.c, d.dir
		foreign := filepath.Join(t.TempDir(), "foreign")
		runBaton(t, nil, "certs", "init", "--dir", foreign, "--users", "payments-api")
		if d.authEnable == nil {
			t.Fatal("docs/security.md has no baton auth enable")
		}
		// Run again, auth enable changes nothing, as the doc says.
		if out, _ := d.baton(d.authEnable); strings.TrimSpace(out) != "auth already enabled" {
			t.Fatalf("second auth enable printed %q", out)
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
		// A user without a role sees nothing, nor one whose role is on
		// another namespace.
		for _, user := range []string{"alice", "scheduler"} {
			if _, err := newMutex(user).Holder(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("%s's Holder: %v, want permission denied", user, err)
			}
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
		figure(t, b.Minor, "docs/security.md's %d steps run; auth enable again a no-op; contender locks, observer reads only, no role denied, no cert and foreign CA refused", len(steps))
	})
}
