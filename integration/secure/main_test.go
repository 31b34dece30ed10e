// Package secure_test proves the secure set-up end to end: an embedded
// etcd serving TLS with client-certificate auth, auth enabled with a root
// user that has no password, and a policy applied with package rbac; then
// baton's mutex and election used by the users that policy names, and by
// clients that must be refused.
package secure_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rbac"
)

// The users of the policy, and a password user.
const (
	payApp  = "payments-app"   // contender of payments
	payOps  = "payments-ops"   // observer of payments
	jobsApp = "jobs-app"       // contender of jobs
	pwUser  = "payments-batch" // contender of payments, authenticates by password
	pwPass  = "batch-password"
	gateway = "gateway"  // has a certificate but is no etcd user
	tempApp = "temp-app" // contender for a while, in TestRevokedRoleEndsTheHold
)

var policy = rbac.Policy{Namespaces: []rbac.Namespace{
	{Name: "payments", Contenders: []string{payApp, pwUser}, Observers: []string{payOps}},
	{Name: "jobs", Contenders: []string{jobsApp}},
}}

var (
	srv     *etcdtest.Server
	pki     string // the CA directory
	foreign string // another CA's directory
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(goleakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var goleakOptions = []goleak.Option{
	// etcd's embedded server leaves these behind until process exit.
	goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

func run(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "baton-secure-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	pki, foreign = filepath.Join(tmp, "pki"), filepath.Join(tmp, "foreign")

	ca, err := rbac.OpenDevCA(pki, rbac.CertOptions{})
	if err != nil {
		return 0, err
	}
	server, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, rbac.CertOptions{})
	if err != nil {
		return 0, err
	}
	for _, u := range []string{"root", payApp, payOps, jobsApp, gateway, tempApp} {
		if _, err := ca.IssueClient(u, rbac.CertOptions{}); err != nil {
			return 0, err
		}
	}
	// Ed25519 for one user, so both key types meet etcd.
	if _, err := ca.IssueClient("ed-user", rbac.CertOptions{KeyType: rbac.Ed25519}); err != nil {
		return 0, err
	}
	// A certificate of ours that expired yesterday.
	if _, err := ca.IssueClient("expired", rbac.CertOptions{NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour}); err != nil {
		return 0, err
	}
	other, err := rbac.OpenDevCA(foreign, rbac.CertOptions{})
	if err != nil {
		return 0, err
	}
	// Another CA's certificate for a user that exists here.
	if _, err := other.IssueClient(payApp, rbac.CertOptions{}); err != nil {
		return 0, err
	}

	info, err := server.ServerInfo()
	if err != nil {
		return 0, err
	}
	// The lowest bcrypt cost: password checks under -race on a loaded
	// machine otherwise take longer than the tests' 2 s bounds.
	s, err := etcdtest.New(etcdtest.Config{TLS: &info, Tune: func(c *embed.Config) { c.BcryptCost = 4 }})
	if err != nil {
		return 0, err
	}
	srv = s
	defer srv.Stop()

	if err := secure(); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// secure enables auth and applies the policy, as an operator would with
// `baton auth enable` and `baton rbac apply`.
func secure() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root, err := dial(certTLS("root"), "", "")
	if err != nil {
		return err
	}
	defer root.Close()
	// The password user exists before the policy names it: Apply keeps
	// its password.
	if _, err := root.UserAdd(ctx, pwUser, pwPass); err != nil {
		return err
	}
	if _, err := rbac.EnableAuth(ctx, root, ""); err != nil {
		return err
	}
	if _, err := rbac.Apply(ctx, root, policy); err != nil {
		return err
	}
	return nil
}

// certTLS is the client configuration of a user of our CA.
func certTLS(user string) *tls.Config {
	cfg, err := rbac.ClientFiles(pki, user).ClientConfig()
	if err != nil {
		panic(err)
	}
	return cfg
}

// dial makes a client over TLS; user and password are optional.
func dial(cfg *tls.Config, user, password string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints(),
		TLS:         cfg,
		Username:    user,
		Password:    password,
		DialTimeout: 3 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// clientOf is the client of a user authenticated by its certificate.
func clientOf(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cli, err := dial(certTLS(user), "", "")
	if err != nil {
		t.Fatalf("client of %s: %v", user, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// isDenied reports whether err is etcd's refusal for lack of permission.
func isDenied(err error) bool {
	return err != nil && errors.Is(err, rpctypes.ErrPermissionDenied)
}

// isWatchDenied is isDenied for a watch: etcd cancels the watch with the
// error's text as reason, so only the text is left to match.
func isWatchDenied(err error) bool {
	return err != nil && strings.Contains(err.Error(), "etcdserver: permission denied")
}
