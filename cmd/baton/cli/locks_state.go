package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// `baton locks` also shows the lock-delays running on the listed kinds
// (internal/delay's markers, each on a lease whose TTL is the time left on
// etcd's clock) and the release requests pending to the holders listed
// (internal/request's keys, one per holder's token).

// delayRow is one running lock-delay.
type delayRow struct {
	Kind  string // kindMutex, kindSemaphore or "rwlock"
	Name  string
	Token int64         // the lost holder's
	Delay time.Duration // the lost holder's delay
	Left  time.Duration // -1 when the marker's lease is gone
}

type delayJSON struct {
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	Token        int64  `json:"lost_token"`
	DelaySeconds int64  `json:"delay_seconds"`
	LeftSeconds  int64  `json:"left_seconds"`
}

type releaseJSON struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// lockStateKinds are the kinds `baton locks` lists, by key kind.
var lockStateKinds = map[keys.Kind]string{keys.Lock: kindMutex, keys.Semaphore: kindSemaphore, keys.RWLock: "rwlock"}

// listDelays reads the lock-delays running on the locks of namespace ns
// whose name starts with prefix, by kind and name, with their time left.
func listDelays(ctx context.Context, cli *clientv3.Client, ns, prefix string) ([]delayRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, keys.Delay), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []delayRow
	for _, kv := range resp.Kvs {
		kind, name, rest, ok := kindNameAfter(keys.KindPrefix(ns, keys.Delay), string(kv.Key))
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
		out = append(out, delayRow{Kind: shown, Name: name, Token: r.Token, Delay: time.Duration(r.DelayMS) * time.Millisecond, Left: left})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Kind < out[j].Kind
	})
	return out, nil
}

// fillReleases sets the pending release request of each row's holder.
func fillReleases(ctx context.Context, cli *clientv3.Client, ns string, rows []lockRow) error {
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

func releaseOf(r *request.Request) *releaseJSON {
	if r == nil {
		return nil
	}
	return &releaseJSON{By: r.By, Reason: r.Reason, At: r.At}
}

func delaysJSON(ds []delayRow) []delayJSON {
	out := []delayJSON{}
	for _, d := range ds {
		out = append(out, delayJSON{Kind: d.Kind, Name: d.Name, Token: d.Token, DelaySeconds: int64(d.Delay / time.Second), LeftSeconds: ttlSeconds(d.Left)})
	}
	return out
}

// writeLockState writes a line per running lock-delay and per pending
// release request; every text from etcd is quoted and escaped.
func writeLockState(w io.Writer, rows []lockRow, ds []delayRow) error {
	for _, d := range ds {
		if _, err := fmt.Fprintf(w, "lock-delay on %s %s: %s of %s left (the holder with token %d was lost)\n",
			d.Kind, safeQ(d.Name), max(d.Left, 0), d.Delay, d.Token); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Release == nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "release requested of %s %s (token %s) by %s at %s: %s\n", rowKind(r), safeQ(r.Name),
			r.Holder.Token, safeQ(r.Release.By), r.Release.At.UTC().Format(time.RFC3339), safeQ(r.Release.Reason)); err != nil {
			return err
		}
	}
	return nil
}
