// Package inspect reads a queue of contenders with their leases' time left, for
// the Holder, Waiters, Candidates and List calls and the CLI.
package inspect

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Entry is one contender's key as read from etcd.
type Entry struct {
	Key            string
	Value          string
	CreateRevision int64
	ModRevision    int64
	Lease          clientv3.LeaseID
	// TTL is the lease's time left when read; -1 when the lease is gone.
	TTL time.Duration
}

// Read returns the contenders under prefix, oldest first, with their lease
// TTLs, and the revision it read at.
func Read(ctx context.Context, cli *clientv3.Client, prefix string) ([]Entry, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0, err
	}
	entries := make([]Entry, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		entries[i] = Entry{
			Key: string(kv.Key), Value: string(kv.Value), CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease),
		}
	}
	if err := FillTTLs(ctx, cli, entries); err != nil {
		return nil, 0, err
	}
	return entries, resp.Header.Revision, nil
}

// FillTTLs sets each entry's TTL, asking once per distinct lease, up to
// ttlParallel requests at a time.
func FillTTLs(ctx context.Context, cli *clientv3.Client, entries []Entry) error {
	ttls := make(map[clientv3.LeaseID]time.Duration)
	for _, e := range entries {
		ttls[e.Lease] = -1
	}
	var (
		mu   sync.Mutex
		errp error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, ttlParallel)
	)
	ids := make([]clientv3.LeaseID, 0, len(ttls))
	for id := range ttls {
		ids = append(ids, id)
	}
	for _, id := range ids {
		if id == clientv3.NoLease {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := cli.TimeToLive(ctx, id)
			ttl := time.Duration(-1)
			switch {
			case err != nil && errors.Is(err, rpctypes.ErrLeaseNotFound):
			case err != nil:
				mu.Lock()
				if errp == nil {
					errp = err
				}
				mu.Unlock()
				return
			case resp.TTL >= 0:
				ttl = time.Duration(resp.TTL) * time.Second
			}
			mu.Lock()
			ttls[id] = ttl
			mu.Unlock()
		}()
	}
	wg.Wait()
	if errp != nil {
		return errp
	}
	for i := range entries {
		entries[i].TTL = ttls[entries[i].Lease]
	}
	return nil
}

// ttlParallel bounds the TimeToLive requests of one FillTTLs in flight.
const ttlParallel = 16
