package keyspace

import (
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// setMembers fills Set for the mutex holders whose key is a set's: the
// keys of one set share their holder's lease and CreateRevision. A name
// outside the listed PREFIX is not seen, so a set may show in part.
func setMembers(rows []LockRow) {
	type id struct {
		lease clientv3.LeaseID
		token int64
	}
	sets := make(map[id][]int)
	for i, r := range rows {
		if RowKind(r) != kindMutex {
			continue
		}
		if _, tag, err := keys.ParseTagged(keysNamespace(r.Holder.Key), r.Holder.Key); err == nil && tag == keys.TagSet {
			k := id{r.Holder.Lease, int64(r.Holder.Token)}
			sets[k] = append(sets[k], i)
		}
	}
	for _, idx := range sets {
		names := make([]string, len(idx))
		for j, i := range idx {
			names[j] = rows[i].Name
		}
		sort.Strings(names)
		for _, i := range idx {
			rows[i].Set = names
		}
	}
}

// keysNamespace is the namespace segment of a key "/<ns>/v1/...".
func keysNamespace(key string) string {
	ns, _, _ := strings.Cut(strings.TrimPrefix(key, "/"), "/")
	return ns
}
