package semaphore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/inspect"
)

// Contender is a holder or waiter of a semaphore, as read from etcd.
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
	// Identity is what the contender wrote (WithIdentity, or "host:pid").
	Identity string
}

func contender(e inspect.Entry) Contender {
	return Contender{Key: e.Key, Token: fencing.Token(e.CreateRevision), Lease: e.Lease, TTL: e.TTL, Identity: e.Value}
}

// Holders returns the contenders that hold a permit, in token order: the
// Limit() oldest, as the semaphore's permits are granted.
func (s *Semaphore) Holders(ctx context.Context) ([]Contender, error) {
	h, _, err := s.read(ctx)
	return h, err
}

// Waiters returns the contenders queued for a permit, in the order they
// will be served.
func (s *Semaphore) Waiters(ctx context.Context) ([]Contender, error) {
	_, w, err := s.read(ctx)
	return w, err
}

func (s *Semaphore) read(ctx context.Context) (holders, waiters []Contender, err error) {
	entries, _, err := inspect.Read(ctx, s.o.Client(), s.Prefix())
	if err != nil {
		return nil, nil, err
	}
	n := inspect.Holding(entries, func(string) core.Policy { return s.policy })
	holders = make([]Contender, 0, n)
	for _, e := range entries[:n] {
		holders = append(holders, contender(e))
	}
	for _, e := range entries[n:] {
		waiters = append(waiters, contender(e))
	}
	return holders, waiters, nil
}
