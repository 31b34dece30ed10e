package queue

import (
	"context"
	"time"

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

// FillTTLs sets each entry's TTL, asking once per distinct lease.
func FillTTLs(ctx context.Context, cli *clientv3.Client, entries []Entry) error {
	ttls := make(map[clientv3.LeaseID]time.Duration)
	for i := range entries {
		id := entries[i].Lease
		ttl, ok := ttls[id]
		if !ok {
			if id == clientv3.NoLease {
				ttl = -1
			} else {
				resp, err := cli.TimeToLive(ctx, id)
				switch {
				case err != nil && isLeaseNotFound(err):
					ttl = -1
				case err != nil:
					return err
				case resp.TTL < 0:
					ttl = -1
				default:
					ttl = time.Duration(resp.TTL) * time.Second
				}
			}
			ttls[id] = ttl
		}
		entries[i].TTL = ttl
	}
	return nil
}
