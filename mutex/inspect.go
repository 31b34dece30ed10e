package mutex

import (
	"context"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/inspect"
	"github.com/batonhq/baton/internal/keys"
)

// Contender is a holder or waiter of a lock, as read from etcd.
type Contender struct {
	// Key is the contender's etcd key.
	Key string
	// Token is the key's CreateRevision: the fencing token it holds or
	// will hold.
	Token fencing.Token
	// Lease is the lease the key is attached to.
	Lease clientv3.LeaseID
	// TTL is the lease's time left when read; -1 if the lease is gone.
	TTL time.Duration
	// Identity is what the contender wrote: WithIdentity's value, or
	// "host:pid".
	Identity string
}

// LockInfo is one lock of a namespace: its holder and its core.
type LockInfo struct {
	Name string
	// Holder is the contender with the lowest token.
	Holder Contender
	// Waiters are the others, in the order they will acquire.
	Waiters []Contender
	// Revision is the etcd revision the listing was read at.
	Revision int64
}

func contender(e inspect.Entry) Contender {
	return Contender{Key: e.Key, Token: fencing.Token(e.CreateRevision), Lease: e.Lease, TTL: e.TTL, Identity: e.Value}
}

// Holder returns the current holder, or the zero Contender (empty Key)
// when the lock is free.
func (m *Mutex) Holder(ctx context.Context) (Contender, error) {
	entries, _, err := inspect.Read(ctx, m.o.Client(), m.Prefix())
	if err != nil || len(entries) == 0 {
		return Contender{}, err
	}
	return contender(entries[0]), nil
}

// Waiters returns the contenders queued behind the holder, in order.
func (m *Mutex) Waiters(ctx context.Context) ([]Contender, error) {
	entries, _, err := inspect.Read(ctx, m.o.Client(), m.Prefix())
	if err != nil || len(entries) < 2 {
		return nil, err
	}
	out := make([]Contender, 0, len(entries)-1)
	for _, e := range entries[1:] {
		out = append(out, contender(e))
	}
	return out, nil
}

// List returns every lock of the namespace (WithNamespace; other options
// are validated and otherwise ignored) that has a holder, sorted by name.
// Keys under the lock prefix that baton did not write are skipped.
func List(ctx context.Context, cli *clientv3.Client, opts ...Option) ([]LockInfo, error) {
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return nil, err
	}
	entries, rev, err := inspect.Read(ctx, cli, keys.KindPrefix(cfg.Namespace, keys.Lock))
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	byName := make(map[string]*LockInfo)
	for _, e := range entries {
		p, err := keys.Parse(cfg.Namespace, e.Key)
		if err != nil || p.Kind != keys.Lock {
			continue
		}
		info, ok := byName[p.Name]
		if !ok {
			info = &LockInfo{Name: p.Name, Holder: contender(e), Revision: rev}
			byName[p.Name] = info
			continue
		}
		info.Waiters = append(info.Waiters, contender(e))
	}
	out := make([]LockInfo, 0, len(byName))
	for _, info := range byName {
		out = append(out, *info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
