package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/retry"
)

// MaxLimit bounds the limit given to New.
const MaxLimit = 10000

// Semaphore is a named counting semaphore: at most Limit permits are held
// at once, across processes. Acquire and TryAcquire return a *Permit for
// each acquisition. A Semaphore is safe for concurrent use, and one
// Semaphore may hold several permits at once (one per call).
type Semaphore struct {
	o        *core.Owner[*Permit]
	limit    int
	limitKey string
	value    string
	policy   core.Policy
	delay    *delay.Config // nil: no WithLockDelay
	checked  atomic.Bool   // the stored limit was found equal to ours
}

// New returns a Semaphore of limit permits for name in the configured
// namespace. It does not contact etcd: the first Acquire grants the lease
// and stores the limit if none is stored yet. limit must be 1 to MaxLimit;
// invalid names, limits and options are rejected with an error wrapping
// ErrInvalid.
func New(cli *clientv3.Client, name string, limit int, opts ...Option) (*Semaphore, error) {
	return newSemaphore(cli, name, limit, queue.FIFO{Limit: limit}, opts)
}

func newSemaphore(cli *clientv3.Client, name string, limit int, policy core.Policy, opts []Option) (*Semaphore, error) {
	if limit < 1 || limit > MaxLimit {
		if err := keys.ValidateName("semaphore name", name); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: semaphore limit is %d, must be 1 to %d", ErrInvalid, limit, MaxLimit)
	}
	p := config.Primitive{Kind: metrics.Semaphore, Keys: keys.Semaphore, LabelPrefix: "semaphore:", Errs: &semErrs}
	o, cfg, value, err := config.Open[*Permit](cli, p, name, opts)
	if err != nil {
		return nil, err
	}
	return &Semaphore{o: o, limit: limit, limitKey: keys.LimitKey(cfg.Namespace, name), value: value, policy: policy,
		delay: delay.New(cli, cfg.Namespace, keys.Semaphore, name, o.Prefix(), cfg.LockDelay)}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.o.Name() }

// Namespace returns the semaphore's namespace.
func (s *Semaphore) Namespace() string { return s.o.Namespace() }

// Prefix returns the etcd prefix under which every contender's key lives.
func (s *Semaphore) Prefix() string { return s.o.Prefix() }

// LimitKey returns the etcd key where the limit is stored.
func (s *Semaphore) LimitKey() string { return s.limitKey }

// Limit returns the number of permits.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire waits until it holds a permit, ctx ends, or the Semaphore is
// closed (ErrClosed). Waiters are served in arrival order. ctx bounds the
// wait only: the Permit's Context lives until the permit is lost or
// released. On error no key of this call is left in etcd. It returns an
// error wrapping ErrLimitMismatch when the semaphore's stored limit is not
// Limit().
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) { return s.acquire(ctx, false) }

// TryAcquire takes a permit if one is free and no one is waiting for it,
// and returns ErrNoPermit at once otherwise. ctx bounds the round trips.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) { return s.acquire(ctx, true) }

func (s *Semaphore) acquire(ctx context.Context, try bool) (*Permit, error) {
	req := core.Request{Value: s.value, Try: try, Tag: keys.TagPermit, Policy: s.policy, Check: s.checkLimit, Limit: s.limit}
	p, err := delay.Acquire(ctx, s.o, s.delay, req, func(h *core.Hold) *Permit { return &Permit{h, s.delay} })
	if errors.Is(err, ErrNoPermit) {
		err = fmt.Errorf("%w (limit %d)", err, s.limit)
	}
	return p, err
}

// checkLimit stores the limit if none is stored, or compares it with the
// stored one, until that succeeds once for this Semaphore. Concurrent first
// calls each check: each is bounded by its own ctx.
func (s *Semaphore) checkLimit(ctx context.Context) error {
	if s.checked.Load() {
		return nil
	}
	want := strconv.Itoa(s.limit)
	var resp *clientv3.TxnResponse
	err := retry.Do(ctx, func(actx context.Context) (err error) {
		resp, err = s.o.Client().Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(s.limitKey), "=", 0)).
			Then(clientv3.OpPut(s.limitKey, want)).
			Else(clientv3.OpGet(s.limitKey)).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("store the limit: %w", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && string(kvs[0].Value) != want {
			return fmt.Errorf("%w: semaphore %q has limit %q stored at %s, this Semaphore was given %d",
				ErrLimitMismatch, s.Name(), kvs[0].Value, s.limitKey, s.limit)
		}
	}
	s.checked.Store(true)
	return nil
}

// Held returns the permits this Semaphore holds, oldest token first,
// including one whose Context a loss has ended (its Release is still due).
func (s *Semaphore) Held() []*Permit { return s.o.Held() }

// Close releases every permit the Semaphore holds (their Context ends with
// ErrReleased), makes waiting and later Acquire calls return ErrClosed,
// and revokes the lease the Semaphore created (a shared session is left
// open). It deletes the Semaphore's metric series unless another open
// Semaphore records under the same label, waits for every goroutine it
// started, and is idempotent. The stored limit stays.
func (s *Semaphore) Close() error { return delay.Close(s.delay, s.o, (*Permit).Release) }

var semErrs = core.Errors{NotHeld: ErrNotHeld, Busy: ErrNoPermit}
