package rbac_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rbac"
)

func ExampleApply() {
	srv, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	cli, err := srv.NewClient()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	policy, err := rbac.Parse([]byte(`
namespaces:
  - name: payments
    contenders: [payments-api]
    requesters: [payments-migrate]
    observers: [oncall]
    operators: [oncall-lead]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	changes, err := rbac.Apply(ctx, cli, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range changes {
		fmt.Println(c)
	}
	again, err := rbac.Apply(ctx, cli, policy)
	fmt.Println("second apply:", len(again), "changes,", err)
	// Output:
	// add-role baton:payments:readwrite
	// grant-permission readwrite ["/payments/v1/", "/payments/v10") on role baton:payments:readwrite
	// grant-permission read ["/payments/audit/v1/", "/payments/audit/v10") on role baton:payments:readwrite
	// add-user payments-api
	// grant-role baton:payments:readwrite to user payments-api
	// add-role baton:payments:read
	// grant-permission read ["/payments/v1/", "/payments/v10") on role baton:payments:read
	// grant-permission read ["/payments/audit/v1/", "/payments/audit/v10") on role baton:payments:read
	// add-user oncall
	// grant-role baton:payments:read to user oncall
	// add-role baton:payments:operate
	// grant-permission readwrite ["/payments/v1/", "/payments/v10") on role baton:payments:operate
	// grant-permission readwrite ["/payments/audit/v1/", "/payments/audit/v10") on role baton:payments:operate
	// add-user oncall-lead
	// grant-role baton:payments:operate to user oncall-lead
	// add-role baton:payments:request
	// grant-permission readwrite ["/payments/v1/", "/payments/v10") on role baton:payments:request
	// grant-permission read ["/payments/audit/v1/", "/payments/audit/v10") on role baton:payments:request
	// grant-permission readwrite ["/payments/audit/v1/request/", "/payments/audit/v1/request0") on role baton:payments:request
	// add-user payments-migrate
	// grant-role baton:payments:request to user payments-migrate
	// second apply: 0 changes, <nil>
}

func ExampleOpenDevCA() {
	dir, err := os.MkdirTemp("", "baton-pki-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{Validity: 30 * 24 * time.Hour})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, rbac.CertOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	files, err := ca.IssueClient("payments-api", rbac.CertOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tlsCfg, err := files.ClientConfig()
	if err != nil {
		fmt.Println(err)
		return
	}
	// The configuration goes to clientv3; etcd, run with
	// --client-cert-auth, sees the user "payments-api".
	_ = clientv3.Config{Endpoints: []string{"https://127.0.0.1:2379"}, TLS: tlsCfg}

	fmt.Println(filepath.Base(files.CA), filepath.Base(files.Cert), filepath.Base(files.Key))
	fmt.Println("TLS 1.2 at least:", tlsCfg.MinVersion >= tls.VersionTLS12)
	// Output:
	// ca.crt client-payments-api.crt client-payments-api.key
	// TLS 1.2 at least: true
}
