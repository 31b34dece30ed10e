package keyspace

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// DelayRow is one running lock-delay.
type DelayRow struct {
	Kind  string // kindMutex, kindSemaphore or "rwlock"
	Name  string
	Token int64         // the lost holder's
	Delay time.Duration // the lost holder's delay
	Left  time.Duration // -1 when the marker's lease is gone
}

// ListDelays reads the lock-delays running on the locks of namespace ns
// whose name starts with prefix, by kind and name, with their time left.
func ListDelays(ctx context.Context, cli *clientv3.Client, ns, prefix string) ([]DelayRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, keys.Delay), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []DelayRow
	for _, kv := range resp.Kvs {
		kind, name, rest, ok := KindNameAfter(keys.KindPrefix(ns, keys.Delay), string(kv.Key))
		shown, listed := lockStateKinds[kind]
		if !ok || !listed || !strings.HasPrefix(rest, "until/") || !strings.HasPrefix(name, prefix) {
			continue // a holder's record, another kind, or not baton's
		}
		var r delay.Record
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		left, err := leaseTTL(ctx, cli, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return nil, err
		}
		out = append(out, DelayRow{Kind: shown, Name: name, Token: r.Token, Delay: time.Duration(r.DelayMS) * time.Millisecond, Left: left})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Kind < out[j].Kind
	})
	return out, nil
}

// FillReleases sets the pending release request of each row's holder.
func FillReleases(ctx context.Context, cli *clientv3.Client, ns string, rows []LockRow) error {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, request.Release), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	reqs := make(map[string]*request.Request, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r request.Request
		if json.Unmarshal(kv.Value, &r) == nil {
			reqs[string(kv.Key)] = &r
		}
	}
	for i := range rows {
		if len(reqs) == 0 {
			break
		}
		rows[i].Release = reqs[request.KeyOf(rows[i].Holder.Key, int64(rows[i].Holder.Token))]
	}
	return nil
}
