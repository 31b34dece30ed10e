package keyspace

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/keys"
)

// etcd keeps no acquisition time: a key's revisions say in which order
// things happened, not when, and a waiter's key is created long before it
// holds. So "held for" and "leading since" come from a record that baton
// lock, baton elect, baton shard and the demo's workers write when they acquire:
//
//	/<ns>/v1/held/<lock|election|shard>/<escaped name>/<lease hex>  →  JSON heldRecord
//
// on the holder's lease (gone with it) and written in the holder's fenced
// transaction (never for a lost hold). Holders that use the library
// directly write none, and are shown as "unknown". The time is the
// holder's clock.
const HeldKind keys.Kind = "held"

type HeldRecord struct {
	Since time.Time `json:"since"`
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
}

func heldPrefix(ns string, kind keys.Kind) string {
	return keys.KindPrefix(ns, HeldKind) + string(kind) + "/"
}

func HeldKey(ns string, kind keys.Kind, name string, lease clientv3.LeaseID) string {
	return heldPrefix(ns, kind) + keys.Escape(name) + "/" + cmdutil.LeaseHex(int64(lease))
}

// ShardHeldName is the name a shard's acquisition record is kept under:
// the group, then the shard's ID in 5 digits (one segment once escaped, so
// no group and ID can read as another's).
func ShardHeldName(group string, id int) string { return group + "/" + fmt.Sprintf("%05d", id) }

// HeldPut is the operation recording an acquisition at t.
func HeldPut(ns string, kind keys.Kind, name string, lease clientv3.LeaseID, t time.Time) clientv3.Op {
	host, _ := os.Hostname()
	b, _ := json.Marshal(HeldRecord{Since: t.UTC(), Host: host, PID: os.Getpid()})
	return clientv3.OpPut(HeldKey(ns, kind, name, lease), string(b), clientv3.WithLease(lease))
}

// RecordHeld writes the acquisition record through the holder's fenced
// transaction. It is informational: a failure is not an error of the
// hold, and a lost hold writes nothing.
func RecordHeld(ctx context.Context, txn func(context.Context) clientv3.Txn, ops ...clientv3.Op) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _ = txn(ctx).Then(ops...).Commit()
}

// ReadHeld maps "<escaped name>/<lease hex>" to the acquisition time for
// every record of one kind.
func ReadHeld(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string) (map[string]time.Time, error) {
	prefix := heldPrefix(ns, kind)
	if name != "" {
		prefix += keys.Escape(name) + "/"
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec HeldRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		out[strings.TrimPrefix(string(kv.Key), heldPrefix(ns, kind))] = rec.Since
	}
	return out, nil
}

// HeldLookup finds the acquisition time of one holder; zero if unknown.
func HeldLookup(m map[string]time.Time, name string, lease clientv3.LeaseID) time.Time {
	return m[keys.Escape(name)+"/"+strconv.FormatInt(int64(lease), 16)]
}

// HeldFor is how long the holder on lease has held, from its acquisition
// record; -1 if unknown.
func HeldFor(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string, lease clientv3.LeaseID) time.Duration {
	held, err := ReadHeld(ctx, cli, ns, kind, name)
	if err != nil {
		return -1
	}
	since := HeldLookup(held, name, lease)
	if since.IsZero() {
		return -1
	}
	return max(time.Since(since), 0)
}
