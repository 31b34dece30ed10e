package mutex

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/observe"
)

// Holder is the state of a lock as Observe sends it. The zero Holder
// (empty Key) means the lock is free.
type Holder struct {
	// Key is the holder's etcd key.
	Key string
	// Identity is what the holder wrote (WithIdentity, or "host:pid").
	Identity string
	// Token is the holder key's CreateRevision.
	Token fencing.Token
	// Lease is the lease the key is attached to.
	Lease clientv3.LeaseID
	// Revision is the etcd revision this state was read or observed at.
	Revision int64
	// Err is set only on the last value Observe sends before it closes its
	// channel because etcd refused the read for good.
	Err error
}

// IsZero reports whether h means "no holder", as election.Leader.IsZero.
func (h Holder) IsZero() bool { return h.Key == "" }

// Observe sends the lock's current holder first ("free" included), then
// every change: a new holder, a release, an expiry. Each etcd revision is
// one state (a transaction that deletes the holder's key and puts another,
// or a prefix delete, is sent once, as its outcome). States are sent in
// strictly increasing Revision, never the same holder twice in a row. It
// follows every contender from its watch, so it names the next holder from
// the deletion event itself, without a read. After compaction, a dropped
// watch or a lost etcd leader it reads again and resumes, so it may skip
// holders that came and went meanwhile but always converges on the
// current one. Receive promptly: Observe waits for the receiver.
//
// The channel is closed when ctx ends, when the Mutex is closed, or when
// etcd refuses the read for good (permission denied, authentication
// failed); in that last case the last value sent has Err set and its
// other fields zero.
func (m *Mutex) Observe(ctx context.Context) <-chan Holder {
	return observe.Chan(ctx, m.o.Go, m.o.Client(), m.o.Prefix(), func(_ context.Context, h observe.Head) Holder {
		return Holder{Key: h.Key, Identity: h.Value, Token: fencing.Token(h.Token), Lease: h.Lease, Revision: h.Revision, Err: h.Err}
	}, nil, m.o.Refused)
}
