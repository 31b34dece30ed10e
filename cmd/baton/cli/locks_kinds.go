package cli

import (
	"context"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// listTagged reads the semaphores (kind keys.Semaphore) or read/write
// locks (keys.RWLock) of namespace ns whose name starts with prefix: a row
// per holder, in token order, each with its name's waiters. Who holds is
// decided as the libraries decide it, from the queue's CreateRevision
// order: a semaphore's Limit oldest keys; a read/write lock's oldest key
// if it is a writer's, else the readers older than every writer.
func listTagged(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, prefix string) ([]lockRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, kind)+keys.Escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	limits := make(map[string]int)
	var names []string
	queues := make(map[string][]lockRow)
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if kind == keys.Semaphore {
			if name, ok := limitKeyName(ns, key); ok {
				limits[name], _ = strconv.Atoi(string(kv.Value))
				continue
			}
		}
		p, tag, err := keys.ParseTagged(ns, key)
		if err != nil || p.Kind != kind || !strings.HasPrefix(p.Name, prefix) {
			continue // not a key baton wrote
		}
		k := kindSemaphore
		if kind == keys.RWLock {
			k = kindWrite
			if tag == keys.TagRead {
				k = kindRead
			}
		}
		if _, ok := queues[p.Name]; !ok {
			names = append(names, p.Name)
		}
		queues[p.Name] = append(queues[p.Name], lockRow{Name: p.Name, Kind: k, Holder: mutex.Contender{Key: key,
			Token: fencing.Token(kv.CreateRevision), Lease: clientv3.LeaseID(kv.Lease), Identity: string(kv.Value)}})
	}
	var rows []lockRow
	for _, name := range names {
		q := queues[name]
		n := holding(q, kind, limits[name])
		for _, r := range q[:n] {
			r.Holders, r.Waiters, r.Limit = n, len(q)-n, limits[name]
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// holding is how many of the queue's oldest keys hold.
func holding(q []lockRow, kind keys.Kind, limit int) int {
	if kind == keys.Semaphore {
		if limit <= 0 {
			return len(q) // no stored limit: show every key
		}
		return min(limit, len(q))
	}
	if len(q) > 0 && q[0].Kind == kindWrite {
		return 1
	}
	n := 0
	for n < len(q) && q[n].Kind == kindRead {
		n++
	}
	return n
}

// limitKeyName is the semaphore name whose limit key is key.
func limitKeyName(ns, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keys.KindPrefix(ns, keys.Semaphore))
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	name, err := keys.Unescape(rest)
	return name, err == nil
}

// holdersCell is the HOLDERS cell: how many hold, and of what limit.
func holdersCell(r lockRow) string {
	switch {
	case r.Kind == kindSemaphore && r.Limit > 0:
		return strconv.Itoa(r.Holders) + "/" + strconv.Itoa(r.Limit)
	case r.Kind == kindSemaphore:
		return strconv.Itoa(r.Holders) + "/?"
	case r.Holders == 0:
		return "1"
	}
	return strconv.Itoa(r.Holders)
}

// rowKind is a row's kind; rows of mutexes leave it empty.
func rowKind(r lockRow) string {
	if r.Kind == "" {
		return kindMutex
	}
	return r.Kind
}

// heldKindOf is the kind under which a row's acquisition record lives.
func heldKindOf(r lockRow) keys.Kind {
	switch r.Kind {
	case kindSemaphore:
		return keys.Semaphore
	case kindRead, kindWrite:
		return keys.RWLock
	}
	return keys.Lock
}
