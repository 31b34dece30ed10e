package retry

import (
	"context"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// requireLeader is etcd's "require leader" metadata, built once: gRPC and
// etcd's client only read an outgoing context's metadata, copying it
// before any change, so one map serves every request.
var requireLeader = metadata.Pairs(rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)

// Leader is clientv3.WithRequireLeader(ctx), without building the metadata
// for a ctx that carries none (a lock's hot path: two maps a request).
func Leader(ctx context.Context) context.Context {
	if _, ok := metadata.FromOutgoingContext(ctx); ok {
		return clientv3.WithRequireLeader(ctx)
	}
	return metadata.NewOutgoingContext(ctx, requireLeader)
}
