package queue

import (
	"context"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// Fence makes an enqueue whose reply was lost harmless. Every enqueue on a
// lease compares the version of the lease's fence key in its namespace
// (absent, version 0, until needed); the cleanup of such an enqueue raises
// that version first, so that no enqueue sent before can apply after it,
// and one read then finds whatever it wrote. The fence key is on the lease
// and goes with it. The zero Fence is ready to use; one per lease.
type Fence struct {
	mu   sync.Mutex
	v    map[string]seen // fence key → its version at the newest read
	fkey struct {
		prefix, key string
		lease       clientv3.LeaseID
	}
	last   *enqueued          // the newest plain enqueue's ops, for the next of the same key
	raises map[string]*raiser // per fence key: the raise in flight, and the next
	woke   func()             // test hook: a caller waiting for the next raise saw the one before return, before it looks again
}

// raiser shares raises of one fence key: a caller that asks while one is
// in flight joins the next, which starts once that one returned, so that
// many cleanups at once (a shard group's member dropping hundreds of
// acquisitions in flight when the group changes) cost two puts, not one
// each. A raise sent after a caller asked voids every enqueue that caller
// could have sent before: sharing it is as safe as sending one's own.
type raiser struct {
	cur, next *raiseCall // in flight; not sent yet
}

type raiseCall struct {
	done   chan struct{}
	err    error
	joined int // callers waiting for it (for tests)
}

// enqueued is one plain enqueue's compares and ops (no Policy, no further
// conditions, without the reads of a refusal), kept so that a lease that
// takes the same key again (one Mutex locking and unlocking) builds them
// once: an Op or a Cmp is not changed by a transaction that sends it
// (clientv3 copies the compares and converts the ops), so they are shared.
// One per lease, whatever it holds: a lease that takes many keys builds
// each as before.
type enqueued struct {
	fkey, key, value, prefix string
	lease                    clientv3.LeaseID
	v                        int64 // the fence version compared
	cmps                     []clientv3.Cmp
	then                     []clientv3.Op
}

// Key is FenceKey(prefix, lease), kept for the lease's newest prefix.
func (f *Fence) Key(prefix string, lease clientv3.LeaseID) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fkey.prefix != prefix || f.fkey.lease != lease || f.fkey.key == "" {
		f.fkey.prefix, f.fkey.lease, f.fkey.key = prefix, lease, FenceKey(prefix, lease)
	}
	return f.fkey.key
}

// plain returns the kept ops of a plain enqueue of key if the fence is
// still at the version they compare, or builds and keeps them.
func (f *Fence) plain(fkey string, lease clientv3.LeaseID, key, value, prefix string) *enqueued {
	f.mu.Lock()
	v := f.v[fkey].version
	e := f.last
	f.mu.Unlock()
	if e != nil && e.v == v && e.key == key && e.value == value && e.fkey == fkey && e.prefix == prefix && e.lease == lease {
		return e
	}
	e = &enqueued{fkey: fkey, key: key, value: value, prefix: prefix, lease: lease, v: v,
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.Version(fkey), "=", v)},
		then: []clientv3.Op{clientv3.OpPut(key, value, clientv3.WithLease(lease)), Read(prefix, nil, true)}}
	f.mu.Lock()
	f.last = e
	f.mu.Unlock()
	return e
}

type seen struct{ version, rev int64 }

// FenceKey is the fence key of lease in the namespace of the queue under
// prefix: /<namespace>/v1/session/<lease id hex>, outside every queue's
// prefix, so no contender sees it.
func FenceKey(prefix string, lease clientv3.LeaseID) string {
	return keys.NamespaceOf(prefix) + "session/" + strconv.FormatInt(int64(lease), 16)
}

// Cmp returns the condition an enqueue carries and the version it compares.
func (f *Fence) Cmp(key string) (clientv3.Cmp, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.v[key].version
	return clientv3.Compare(clientv3.Version(key), "=", v), v
}

// FenceGet is the read, beside a failed enqueue, that tells whether the
// fence moved.
func FenceGet(key string) clientv3.Op { return clientv3.OpGet(key, clientv3.WithKeysOnly()) }

// Moved records the version in read (of FenceGet, at revision rev) and
// reports whether it is not v, the version the enqueue compared.
func (f *Fence) Moved(key string, v int64, read []*mvccpb.KeyValue, rev int64) bool {
	got := int64(0)
	if len(read) > 0 {
		got = read[0].Version
	}
	f.see(key, got, rev)
	return got != v
}

// Raise puts the fence key on lease: once it returns nil, no enqueue that
// compared an older version can apply. Callers at once share a put: one
// that asks while a raise is in flight waits for the next, sent once that
// one returned by the first of its callers to see it return (raiser).
func (f *Fence) Raise(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, key string) error {
	f.mu.Lock()
	if f.raises == nil {
		f.raises = map[string]*raiser{}
	}
	r := f.raises[key]
	if r == nil {
		r = &raiser{}
		f.raises[key] = r
	}
	if r.cur == nil {
		// The next raise, if its callers have not sent it yet (the one before
		// just returned), goes now for them and this caller: a raise of this
		// caller's own would leave theirs unsent, and they wait for it.
		c := r.next
		if c == nil {
			c = &raiseCall{done: make(chan struct{})}
		}
		r.cur, r.next = c, nil
		f.mu.Unlock()
		return f.raise(ctx, cli, lease, key, r, c)
	}
	if r.next == nil {
		r.next = &raiseCall{done: make(chan struct{})}
	}
	c, cur := r.next, r.cur
	c.joined++
	f.mu.Unlock()
	for {
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		case <-cur.done:
			if f.woke != nil {
				f.woke()
			}
			f.mu.Lock()
			switch {
			case r.cur == nil && r.next == c: // this caller sends the next
				r.cur, r.next = c, nil
				f.mu.Unlock()
				return f.raise(ctx, cli, lease, key, r, c)
			case r.cur != nil && r.cur != c && r.next == c:
				cur = r.cur // not c, which is still to send: wait for that one, then look again
			default:
				cur = c // sent by another caller
			}
			f.mu.Unlock()
		}
	}
}

// raise sends c, r's raise in flight, and tells its callers.
func (f *Fence) raise(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, key string, r *raiser, c *raiseCall) error {
	resp, err := cli.Txn(clientv3.WithRequireLeader(ctx)).Then(clientv3.OpPut(key, "", clientv3.WithLease(lease)), FenceGet(key)).Commit()
	if err == nil {
		f.Moved(key, 0, resp.Responses[1].GetResponseRange().Kvs, resp.Header.Revision)
	}
	f.mu.Lock()
	r.cur, c.err = nil, err
	close(c.done)
	f.mu.Unlock()
	return err
}

// see keeps the newest read: a fence key deleted by hand reads 0 again,
// and the enqueues must compare that, not spin on an older version.
func (f *Fence) see(key string, v, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.v == nil {
		f.v = map[string]seen{}
	}
	if rev >= f.v[key].rev {
		f.v[key] = seen{v, rev}
	}
}
