package keyspace

import (
	"context"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/mutex"
)

// ListTagged reads the semaphores (kind keys.Semaphore) or read/write
// locks (keys.RWLock) of namespace ns whose name starts with prefix: a row
// per holder, in token order, each with its name's waiters. Who holds is
// decided by the libraries' rule (Holding).
func ListTagged(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, prefix string) ([]LockRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, kind)+keys.Escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	limits := make(map[string]int)
	var names []string
	queues := make(map[string][]LockRow)
	kvs := make(map[string][]*mvccpb.KeyValue)
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if kind == keys.Semaphore {
			if name, ok := LimitKeyName(ns, key); ok {
				limits[name], _ = strconv.Atoi(string(kv.Value))
				continue
			}
		}
		p, tag, err := keys.ParseTagged(ns, key)
		if err != nil || p.Kind != kind || !strings.HasPrefix(p.Name, prefix) {
			continue // not a key baton wrote
		}
		k := KindSemaphore
		if kind == keys.RWLock {
			k = kindWrite
			if tag == keys.TagRead {
				k = KindRead
			}
		}
		if _, ok := queues[p.Name]; !ok {
			names = append(names, p.Name)
		}
		kvs[p.Name] = append(kvs[p.Name], kv)
		queues[p.Name] = append(queues[p.Name], LockRow{Name: p.Name, Kind: k, Holder: mutex.Contender{Key: key,
			Token: fencing.Token(kv.CreateRevision), Lease: clientv3.LeaseID(kv.Lease), Identity: string(kv.Value)}})
	}
	var rows []LockRow
	for _, name := range names {
		q := queues[name]
		n := Holding(kind, limits[name], kvs[name])
		for _, r := range q[:n] {
			r.Holders, r.Waiters, r.Limit = n, len(q)-n, limits[name]
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// Holding is how many of a queue's keys (oldest first, by CreateRevision)
// hold, by the rule the library's keys wait by (queue.Holding): a lock's or
// an election's oldest key; a semaphore's limit oldest, or every key while
// no limit is stored (limit <= 0); a read/write lock's oldest key if it is
// a writer's, else the readers older than every writer. baton locks and
// baton ui both count by it.
func Holding(kind keys.Kind, limit int, q []*mvccpb.KeyValue) int {
	switch kind {
	case keys.Semaphore:
		if limit <= 0 {
			return len(q) // no stored limit: show every key
		}
		return queue.Holding(q, func(string) queue.Policy { return queue.FIFO{Limit: limit} })
	case keys.RWLock:
		return queue.Holding(q, queue.RW(queue.Readers{}))
	}
	return queue.Holding(q, nil)
}

// LimitKeyName is the semaphore name whose limit key is key.
func LimitKeyName(ns, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keys.KindPrefix(ns, keys.Semaphore))
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	name, err := keys.Unescape(rest)
	return name, err == nil
}

// HeldKindOf is the kind under which a row's acquisition record lives.
func HeldKindOf(r LockRow) keys.Kind {
	switch r.Kind {
	case KindSemaphore:
		return keys.Semaphore
	case KindRead, kindWrite:
		return keys.RWLock
	}
	return keys.Lock
}
