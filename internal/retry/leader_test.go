package retry_test

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/batonhq/baton/internal/retry"
)

// Leader marks a request as clientv3.WithRequireLeader does, keeping the
// caller's own metadata, and shares its map without letting a change
// through: a caller that adds metadata later gets a copy.
func TestLeaderIsWithRequireLeader(t *testing.T) {
	for _, ctx := range []context.Context{
		context.Background(),
		metadata.AppendToOutgoingContext(context.Background(), "x-caller", "a"),
	} {
		got, _ := metadata.FromOutgoingContext(retry.Leader(ctx))
		want, _ := metadata.FromOutgoingContext(clientv3.WithRequireLeader(ctx))
		if len(got) != len(want) || got.Get(rpctypes.MetadataRequireLeaderKey)[0] != rpctypes.MetadataHasLeader {
			t.Fatalf("Leader: %v, WithRequireLeader: %v", got, want)
		}
		for k := range want {
			if got.Get(k)[0] != want.Get(k)[0] {
				t.Fatalf("Leader: %v, WithRequireLeader: %v", got, want)
			}
		}
	}
	a := metadata.AppendToOutgoingContext(retry.Leader(context.Background()), "x-later", "b")
	if md, _ := metadata.FromOutgoingContext(retry.Leader(context.Background())); len(md) != 1 {
		t.Fatalf("the shared metadata changed: %v", md)
	}
	if md, _ := metadata.FromOutgoingContext(a); md.Get("x-later")[0] != "b" || len(md) != 2 {
		t.Fatalf("appended metadata: %v", md)
	}
}
