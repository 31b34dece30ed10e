package queue

import (
	"context"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// Fence makes an enqueue whose reply was lost harmless. Every enqueue on a
// lease compares the version of the lease's fence key in its namespace
// (absent, version 0, until needed); the cleanup of such an enqueue raises
// that version first, so that no enqueue sent before can apply after it,
// and one read then finds whatever it wrote. The fence key is on the lease
// and goes with it. The zero Fence is ready to use; one per lease.
type Fence struct {
	mu sync.Mutex
	v  map[string]seen // fence key → its version at the newest read
}

type seen struct{ version, rev int64 }

// FenceKey is the fence key of lease in the namespace of the queue under
// prefix: /<namespace>/v1/session/<lease id hex>, outside every queue's
// prefix, so no contender sees it.
func FenceKey(prefix string, lease clientv3.LeaseID) string {
	return keys.NamespaceOf(prefix) + "session/" + strconv.FormatInt(int64(lease), 16)
}

// Cmp returns the condition an enqueue carries and the version it compares.
func (f *Fence) Cmp(key string) (clientv3.Cmp, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.v[key].version
	return clientv3.Compare(clientv3.Version(key), "=", v), v
}

// FenceGet is the read, beside a failed enqueue, that tells whether the
// fence moved.
func FenceGet(key string) clientv3.Op { return clientv3.OpGet(key, clientv3.WithKeysOnly()) }

// Moved records the version in read (of FenceGet, at revision rev) and
// reports whether it is not v, the version the enqueue compared.
func (f *Fence) Moved(key string, v int64, read []*mvccpb.KeyValue, rev int64) bool {
	got := int64(0)
	if len(read) > 0 {
		got = read[0].Version
	}
	f.see(key, got, rev)
	return got != v
}

// Raise puts the fence key on lease: once it returns nil, no enqueue that
// compared an older version can apply.
func (f *Fence) Raise(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, key string) error {
	resp, err := cli.Txn(clientv3.WithRequireLeader(ctx)).Then(clientv3.OpPut(key, "", clientv3.WithLease(lease)), FenceGet(key)).Commit()
	if err != nil {
		return err
	}
	f.Moved(key, 0, resp.Responses[1].GetResponseRange().Kvs, resp.Header.Revision)
	return nil
}

// see keeps the newest read: a fence key deleted by hand reads 0 again,
// and the enqueues must compare that, not spin on an older version.
func (f *Fence) see(key string, v, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.v == nil {
		f.v = map[string]seen{}
	}
	if rev >= f.v[key].rev {
		f.v[key] = seen{v, rev}
	}
}
