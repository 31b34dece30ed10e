package rwmutex

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/queue"
)

// RWMutex is a named distributed read/write lock: any number of readers,
// or one writer. RLock, TryRLock, Lock and TryLock return a *Lock for each
// acquisition. An RWMutex is safe for concurrent use, and one RWMutex may
// hold several read locks at once (one per call).
type RWMutex struct {
	o       *core.Owner[*Lock]
	value   string
	readers core.Policy
	delay   *delay.Config // nil: no WithLockDelay
}

// IsReader reports whether a key of an RWMutex is a reader's.
func IsReader(key string) bool { return queue.IsReader(key) }

// New returns an RWMutex for name in the configured namespace. It does not
// contact etcd. Invalid names and options are rejected with an error
// wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*RWMutex, error) {
	return newRWMutex(cli, name, queue.Readers{}, opts)
}

func newRWMutex(cli *clientv3.Client, name string, readers core.Policy, opts []Option) (*RWMutex, error) {
	p := config.Primitive{Kind: metrics.RWMutex, Keys: keys.RWLock, LabelPrefix: "rwmutex:", Errs: &rwErrs}
	o, cfg, value, err := config.Open[*Lock](cli, p, name, opts)
	if err != nil {
		return nil, err
	}
	return &RWMutex{o: o, value: value, readers: readers, delay: delay.New(cli, cfg.Namespace, keys.RWLock, name, o.Prefix(), cfg.LockDelay)}, nil
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.o.Name() }

// Namespace returns the lock's namespace.
func (rw *RWMutex) Namespace() string { return rw.o.Namespace() }

// Prefix returns the etcd prefix under which every contender's key lives.
func (rw *RWMutex) Prefix() string { return rw.o.Prefix() }

// RLock waits until it holds a read lock: until no writer that came
// before it holds or waits. ctx bounds the wait only. On error no key of
// this call is left in etcd. A reader that already holds a read lock and
// calls RLock again waits behind any writer queued since, as
// sync.RWMutex's readers do: a writer waiting for the first read lock and
// the second RLock waiting for the writer deadlock. Do not take a read
// lock recursively; use the one held.
func (rw *RWMutex) RLock(ctx context.Context) (*Lock, error) { return rw.lock(ctx, true, false) }

// TryRLock takes a read lock if no writer holds or waits, and returns
// ErrLocked at once otherwise.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lock, error) { return rw.lock(ctx, true, true) }

// Lock waits until it holds the write lock: until every reader and writer
// that came before it is gone. Readers that come after it wait for it, so
// a stream of readers cannot starve it. ctx bounds the wait only.
func (rw *RWMutex) Lock(ctx context.Context) (*Lock, error) { return rw.lock(ctx, false, false) }

// TryLock takes the write lock if no one holds or waits for the lock, and
// returns ErrLocked at once otherwise.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lock, error) { return rw.lock(ctx, false, true) }

func (rw *RWMutex) lock(ctx context.Context, shared, try bool) (*Lock, error) {
	req := core.Request{Value: rw.value, Try: try, Tag: keys.TagWrite}
	if shared {
		req.Tag, req.Policy = keys.TagRead, rw.readers
	}
	return delay.Acquire(ctx, rw.o, rw.delay, req, func(h *core.Hold) *Lock { return &Lock{h, shared, rw.delay} })
}

// Held returns the locks this RWMutex holds, read locks first, each kind
// in token order, including one whose Context a loss has ended (its
// Unlock is still due).
func (rw *RWMutex) Held() []*Lock {
	all := rw.o.Held()
	out := make([]*Lock, 0, len(all))
	for _, shared := range []bool{true, false} {
		for _, l := range all {
			if l.shared == shared {
				out = append(out, l)
			}
		}
	}
	return out
}

// Close releases every lock the RWMutex holds (their Context ends with
// ErrReleased), makes waiting and later calls return ErrClosed, and
// revokes the lease the RWMutex created (a shared session is left open),
// all within one bound of a few seconds however many locks it holds. It
// deletes the RWMutex's metric series unless another open RWMutex records
// under the same label, waits for every goroutine it started, and is
// idempotent.
func (rw *RWMutex) Close() error { return delay.Close(rw.delay, rw.o, (*Lock).Unlock) }

var rwErrs = core.Errors{NotHeld: ErrNotHeld, Busy: ErrLocked}
