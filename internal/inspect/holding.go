package inspect

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/batonhq/baton/internal/queue"
)

// Holding is how many of entries (oldest first) hold, by the rule their
// keys wait by (queue.Holding).
func Holding(entries []Entry, policy func(key string) queue.Policy) int {
	kvs := make([]*mvccpb.KeyValue, len(entries))
	for i, e := range entries {
		kvs[i] = &mvccpb.KeyValue{Key: []byte(e.Key), CreateRevision: e.CreateRevision}
	}
	return queue.Holding(kvs, policy)
}
