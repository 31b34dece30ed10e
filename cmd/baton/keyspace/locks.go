package keyspace

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/mutex"
)

// LockRow is one line of `baton locks`: one holder of a lock.
type LockRow struct {
	Name    string
	Kind    string // kindMutex ("" too), kindSemaphore, kindRead or kindWrite
	Holder  mutex.Contender
	Since   time.Time // zero when unknown
	Waiters int
	Holders int // how many hold the same lock (0: one)
	Limit   int // a semaphore's stored limit (0: none or unknown)
	// Set names every lock its holder took with it in one transaction
	// (baton lock A B --, mutex.NewSet), this one included; nil otherwise.
	Set []string
	// Release is the release request pending to the holder, if any.
	Release *request.Request
	// Unread is true when the holder's key is of a form this build does
	// not write (a newer release's): it holds by its revision all the
	// same, as every contender orders the queue.
	Unread bool
}

// ttlWorkers bounds the TimeToLive requests in flight.
const ttlWorkers = 32

// ListLocks reads the locks (mutexes, semaphores, read/write locks) of
// namespace ns whose name starts with prefix, sorted by name: each range is filtered by etcd (escaping keeps name
// prefixes as key prefixes, and an escaped prefix never reaches past the
// name's segment), and the holders' TTLs are asked in parallel.
func ListLocks(ctx context.Context, cli *clientv3.Client, ns, prefix string) ([]LockRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, keys.Lock)+keys.Escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int)
	var rows []LockRow
	for _, kv := range resp.Kvs {
		name, unread := "", false
		if p, err := keys.Parse(ns, string(kv.Key)); err == nil && p.Kind == keys.Lock {
			name = p.Name
		} else if name, unread = unreadName(ns, string(kv.Key)); !unread {
			continue // not a key baton wrote
		}
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if i, ok := byName[name]; ok {
			rows[i].Waiters++
			continue
		}
		byName[name] = len(rows)
		rows = append(rows, LockRow{Name: name, Unread: unread, Holder: mutex.Contender{Key: string(kv.Key), Token: fencing.Token(kv.CreateRevision),
			Lease: clientv3.LeaseID(kv.Lease), Identity: string(kv.Value)}})
	}
	for _, kind := range []keys.Kind{keys.Semaphore, keys.RWLock} {
		more, err := ListTagged(ctx, cli, ns, kind, prefix)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	if err := fillTTLs(ctx, cli, rows); err != nil {
		return nil, err
	}
	setMembers(rows)
	// By name, then kind; a lock's holders stay in token order.
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Name != rows[j].Name {
			return rows[i].Name < rows[j].Name
		}
		return RowKind(rows[i]) < RowKind(rows[j])
	})
	return rows, nil
}

// unreadName is the lock name of a key under a lock's name whose last
// segment this build does not write (a tag of a newer release): a
// contender of that name all the same, which mutexes of every build queue
// by its revision. ok is false for a key outside any lock's name.
func unreadName(ns, key string) (name string, ok bool) {
	rest, found := strings.CutPrefix(key, keys.KindPrefix(ns, keys.Lock))
	seg, last, two := strings.Cut(rest, "/")
	if !found || !two || last == "" || strings.Contains(last, "/") {
		return "", false
	}
	name, err := keys.Unescape(seg)
	if err != nil || keys.ValidateName("name", name) != nil {
		return "", false
	}
	return name, true
}

// fillTTLs asks each distinct holder lease's TTL, at most ttlWorkers at a
// time; the first error ends the others.
func fillTTLs(ctx context.Context, cli *clientv3.Client, rows []LockRow) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	leases := make(chan clientv3.LeaseID)
	var mu sync.Mutex
	ttls := make(map[clientv3.LeaseID]time.Duration, len(rows))
	var wg sync.WaitGroup
	for range min(ttlWorkers, len(rows)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range leases {
				ttl, err := leaseTTL(ctx, cli, id)
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				ttls[id] = ttl
				mu.Unlock()
			}
		}()
	}
	seen := make(map[clientv3.LeaseID]bool, len(rows))
feed:
	for _, r := range rows {
		if seen[r.Holder.Lease] {
			continue
		}
		seen[r.Holder.Lease] = true
		select {
		case leases <- r.Holder.Lease:
		case <-ctx.Done():
			break feed
		}
	}
	close(leases)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for i := range rows {
		rows[i].Holder.TTL = ttls[rows[i].Holder.Lease]
	}
	return nil
}

// leaseTTL is a lease's time left; -1 once it is gone.
func leaseTTL(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) (time.Duration, error) {
	if id == clientv3.NoLease {
		return -1, nil
	}
	resp, err := cli.TimeToLive(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return -1, nil
	case err != nil:
		return 0, err
	case resp.TTL < 0:
		return -1, nil
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
