package mutex

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// Mutex is a named distributed lock. Lock and TryLock return a *Lock for
// each acquisition. A Mutex is safe for concurrent use: goroutines that
// lock it at once exclude each other like separate processes do.
type Mutex struct {
	o     *core.Owner[*Lock]
	value string
	delay *delay.Config // nil: no WithLockDelay
}

// New returns a Mutex for name in the configured namespace. It does not
// contact etcd: the lease is granted by the first Lock or TryLock. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Mutex, error) {
	o, cfg, value, err := config.Open[*Lock](cli, primitive(), name, opts)
	if err != nil {
		return nil, err
	}
	return &Mutex{o: o, value: value, delay: delay.New(cli, cfg.Namespace, keys.Lock, name, o.Prefix(), cfg.LockDelay)}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.o.Name() }

// Namespace returns the lock's namespace.
func (m *Mutex) Namespace() string { return m.o.Namespace() }

// Prefix returns the etcd prefix under which every contender's key lives.
func (m *Mutex) Prefix() string { return m.o.Prefix() }

// Lock waits until it holds the lock, ctx ends, or the Mutex is closed
// (ErrClosed). ctx bounds the wait only: the returned Lock's Context lives
// until the lock is lost or released. On error no key of this call is left
// in etcd. Waiting is by watching the key just ahead in the queue, so a
// release wakes one waiter, first come first served. A refusal by etcd
// (permission denied, authentication failed, invalid request) is returned
// at once and never retried.
func (m *Mutex) Lock(ctx context.Context) (*Lock, error) { return m.lock(ctx, false) }

// TryLock takes the lock if no one holds it and returns ErrLocked at once
// if someone does. ctx bounds the round trips.
func (m *Mutex) TryLock(ctx context.Context) (*Lock, error) { return m.lock(ctx, true) }

func (m *Mutex) lock(ctx context.Context, try bool) (*Lock, error) {
	return delay.Acquire(ctx, m.o, m.delay, core.Request{Value: m.value, Try: try}, func(h *core.Hold) *Lock {
		if m.delay != nil {
			return &Lock{hold: h, set: &setLock{delay: m.delay}, m: m}
		}
		return &Lock{hold: h, m: m}
	})
}

func newLock(h *core.Hold) *Lock { return &Lock{hold: h} }

func primitive() config.Primitive {
	return config.Primitive{Kind: metrics.Mutex, Keys: keys.Lock, Errs: &mutexErrs}
}

var mutexErrs = core.Errors{NotHeld: ErrNotHeld, Busy: ErrLocked}

// Held returns the locks this Mutex holds, in acquisition order: every
// Lock that Lock or TryLock returned and that was not unlocked since,
// including one whose Context a loss has ended (its Unlock is still due).
// It is for inspection, such as a debug endpoint; use a Lock's Context,
// not this list, to decide whether to write.
func (m *Mutex) Held() []*Lock { return m.o.Held() }

// Close releases every lock the Mutex holds (their Context ends with
// ErrReleased), makes waiting and later Lock calls return ErrClosed, and
// revokes the lease the Mutex created (a shared session is left open). It
// deletes the Mutex's metric series unless another open Mutex records
// under the same label, waits for every goroutine the Mutex started, and
// is idempotent. It returns within a few seconds even when etcd is
// unreachable.
func (m *Mutex) Close() error { return delay.Close(m.delay, m.o, (*Lock).Unlock) }
