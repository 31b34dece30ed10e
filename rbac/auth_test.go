package rbac_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rbac"
)

func passwordClient(t *testing.T, s *etcdtest.Server, user, password string) (*clientv3.Client, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password,
	})
	if err == nil {
		t.Cleanup(func() { _ = cli.Close() })
	}
	return cli, err
}

// TestEnableAuthCreatesRootAndIsSafeTwice runs on its own member: once
// auth is on, every other test's client would need credentials.
func TestEnableAuthCreatesRootAndIsSafeTwice(t *testing.T) {
	own := etcdtest.Start(t)
	cli := own.Client(t)
	ctx := testCtx(t)

	changes, err := rbac.EnableAuth(ctx, cli, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"add-user root", "grant-role root to user root", "enable-auth"}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	// The client without credentials is now refused.
	if _, err := cli.Put(ctx, "/x", "y"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("anonymous put after EnableAuth: err = %v, want ErrUserEmpty", err)
	}
	// Twice is fine, even from the anonymous client.
	if changes, err := rbac.EnableAuth(ctx, cli, "other"); err != nil || changes != nil {
		t.Fatalf("second EnableAuth = %v, %v", changeStrings(changes), err)
	}
	// Root's password is the first one: the second call changed nothing.
	root, err := passwordClient(t, own, "root", "s3cret")
	if err != nil {
		t.Fatalf("root with its password: %v", err)
	}
	if _, err := root.Put(ctx, "/x", "y"); err != nil {
		t.Fatalf("root put: %v", err)
	}
	if _, err := passwordClient(t, own, "root", "other"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("root with a wrong password: err = %v, want ErrAuthFailed", err)
	}
	if changes, err := rbac.EnableAuth(ctx, root, "s3cret"); err != nil || changes != nil {
		t.Fatalf("EnableAuth as root when on = %v, %v", changeStrings(changes), err)
	}
}

func TestEnableAuthKeepsAnExistingRoot(t *testing.T) {
	own := etcdtest.Start(t)
	cli := own.Client(t)
	ctx := testCtx(t)
	// root made by hand, without the root role yet.
	if _, err := cli.UserAdd(ctx, "root", "mine"); err != nil {
		t.Fatal(err)
	}
	changes, err := rbac.EnableAuth(ctx, cli, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"grant-role root to user root", "enable-auth"}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if _, err := passwordClient(t, own, "root", "mine"); err != nil {
		t.Fatalf("root's own password no longer works: %v", err)
	}
}
