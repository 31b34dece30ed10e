package rwmutex

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/inspect"
	"github.com/batonhq/baton/internal/queue"
)

// Contender is a holder or waiter of an RWMutex, as read from etcd.
type Contender struct {
	// Key is the contender's etcd key.
	Key string
	// Shared is true for a reader.
	Shared bool
	// Token is the key's CreateRevision.
	Token fencing.Token
	// Lease is the lease the key is attached to.
	Lease clientv3.LeaseID
	// TTL is the lease's time left when read; -1 if the lease is gone.
	TTL time.Duration
	// Identity is what the contender wrote (WithIdentity, or "host:pid").
	Identity string
}

// Holders returns the contenders that hold the lock, in token order: one
// writer, or the readers older than every writer.
func (rw *RWMutex) Holders(ctx context.Context) ([]Contender, error) {
	h, _, err := rw.read(ctx)
	return h, err
}

// Waiters returns the contenders waiting, in token order.
func (rw *RWMutex) Waiters(ctx context.Context) ([]Contender, error) {
	_, w, err := rw.read(ctx)
	return w, err
}

func (rw *RWMutex) read(ctx context.Context) (holders, waiters []Contender, err error) {
	entries, _, err := inspect.Read(ctx, rw.o.Client(), rw.Prefix())
	if err != nil {
		return nil, nil, err
	}
	n := inspect.Holding(entries, queue.RW(rw.readers))
	for i, e := range entries {
		c := Contender{Key: e.Key, Shared: IsReader(e.Key), Token: fencing.Token(e.CreateRevision), Lease: e.Lease, TTL: e.TTL, Identity: e.Value}
		if i < n {
			holders = append(holders, c)
		} else {
			waiters = append(waiters, c)
		}
	}
	return holders, waiters, nil
}
