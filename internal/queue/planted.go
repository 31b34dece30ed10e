package queue

import (
	"context"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PlantedStaleRead is planted bug c's read of the queue under prefix: a
// serializable one, made before the enqueue, that a semaphore's key then
// decides by (nil if it failed).
func PlantedStaleRead(ctx context.Context, cli *clientv3.Client, prefix string) *etcdserverpb.RangeResponse {
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil
	}
	return &etcdserverpb.RangeResponse{Kvs: r.Kvs, Count: int64(len(r.Kvs))}
}
