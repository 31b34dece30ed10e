package rbac

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

// TestAuthProbeTellsOffFromOn checks the etcd 3.4 path of AuthEnabled
// (no AuthStatus RPC) on a member whose auth goes from off to on; the
// compatibility suite runs it against a real 3.4.
func TestAuthProbeTellsOffFromOn(t *testing.T) {
	own := etcdtest.Start(t)
	cli := own.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if on, err := authEnabledByProbe(ctx, cli); err != nil || on {
		t.Fatalf("probe with auth off = %v, %v; want false", on, err)
	}
	if _, err := EnableAuth(ctx, cli, "s3cret"); err != nil {
		t.Fatal(err)
	}
	// The anonymous client still gets an answer.
	if on, err := authEnabledByProbe(ctx, cli); err != nil || !on {
		t.Fatalf("probe with auth on = %v, %v; want true", on, err)
	}
}
