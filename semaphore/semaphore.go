package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/retry"
)

// MaxLimit bounds the limit given to New.
const MaxLimit = 10000

// Semaphore is a named counting semaphore: at most Limit permits are held
// at once, across processes. Acquire and TryAcquire return a *Permit for
// each acquisition. A Semaphore is safe for concurrent use, and one
// Semaphore may hold several permits at once (one per call).
type Semaphore struct {
	cli      *clientv3.Client
	name     string
	limit    int
	label    string
	prefix   string
	limitKey string
	cfg      config.Config
	met      *metrics.Metrics
	log      *zap.Logger
	value    string
	owner    *core.Owner[*Permit]
	unsub    func()

	checked atomic.Bool // the stored limit was found equal to ours
}

// fifo lets a key hold while fewer than limit keys older than it remain:
// permits go in arrival order, and no key overtakes an older waiter.
type fifo struct{ limit int }

func (p fifo) Blockers(_ string, older []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) {
	return older, p.limit - 1
}

// New returns a Semaphore of limit permits for name in the configured
// namespace. It does not contact etcd: the first Acquire grants the lease
// and stores the limit if none is stored yet. limit must be 1 to MaxLimit;
// invalid names, limits and options are rejected with an error wrapping
// ErrInvalid.
func New(cli *clientv3.Client, name string, limit int, opts ...Option) (*Semaphore, error) {
	return newSemaphore(cli, name, limit, fifo{limit}, opts)
}

func newSemaphore(cli *clientv3.Client, name string, limit int, policy core.Policy, opts []Option) (*Semaphore, error) {
	if err := keys.ValidateName("semaphore name", name); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxLimit {
		return nil, fmt.Errorf("%w: semaphore limit is %d, must be 1 to %d", ErrInvalid, limit, MaxLimit)
	}
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return nil, err
	}
	value, err := cfg.HolderIdentity()
	if err != nil {
		return nil, err
	}
	met, err := cfg.Metrics()
	if err != nil {
		return nil, err
	}
	s := &Semaphore{
		cli: cli, name: name, limit: limit, label: "semaphore:" + name,
		prefix: keys.Prefix(cfg.Namespace, keys.Semaphore, name), limitKey: keys.LimitKey(cfg.Namespace, name),
		cfg: cfg, met: met, value: value,
		log: cfg.Session.Logger.With(zap.String("name", name), zap.String("namespace", cfg.Namespace), zap.Int("limit", limit)),
	}
	if cfg.MetricLabel != "" {
		s.label = cfg.MetricLabel
	}
	sess, own := cfg.NewSession(cli)
	if fn := met.RenewalFailed(cfg.Namespace, s.label); fn != nil {
		s.unsub = sess.OnRenewalFailure(fn)
	}
	s.owner = core.NewOwner[*Permit](sess, core.OwnerConfig{
		Prefix: s.prefix, NotHeld: ErrNotHeld, OwnSession: own,
		Policy: policy, Tag: keys.TagPermit, Events: (*events)(s),
	})
	return s, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Namespace returns the semaphore's namespace.
func (s *Semaphore) Namespace() string { return s.cfg.Namespace }

// Prefix returns the etcd prefix under which every contender's key lives.
func (s *Semaphore) Prefix() string { return s.prefix }

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
	start := time.Now()
	var p *Permit
	err := s.checkLimit(ctx)
	if err == nil {
		p, err = s.owner.Acquire(ctx, s.value, try, func(h *core.Hold) *Permit { return &Permit{s: s, h: h} })
	}
	result := "acquired"
	switch {
	case err == nil:
		if s.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			s.log.Debug("permit acquired", p.h.LogFields()...)
		}
	case errors.Is(err, core.ErrBusy):
		err, result = fmt.Errorf("%w: %q (limit %d)", ErrNoPermit, s.name, s.limit), "locked"
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		result = "canceled"
	default:
		result = "error"
	}
	s.met.ObserveAcquire(s.cfg.Namespace, s.label, result, time.Since(start))
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
		resp, err = s.cli.Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(s.limitKey), "=", 0)).
			Then(clientv3.OpPut(s.limitKey, want)).
			Else(clientv3.OpGet(s.limitKey)).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("semaphore %q: store the limit: %w", s.name, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && string(kvs[0].Value) != want {
			return fmt.Errorf("%w: semaphore %q has limit %q stored at %s, this Semaphore was given %d",
				ErrLimitMismatch, s.name, kvs[0].Value, s.limitKey, s.limit)
		}
	}
	s.checked.Store(true)
	return nil
}

// Held returns the permits this Semaphore holds, oldest token first,
// including one whose Context a loss has ended (its Release is still due).
func (s *Semaphore) Held() []*Permit { return s.owner.Held() }

// Close releases every permit the Semaphore holds (their Context ends with
// ErrReleased), makes waiting and later Acquire calls return ErrClosed,
// and revokes the lease the Semaphore created (a shared session is left
// open). It deletes the Semaphore's metric series, waits for every
// goroutine it started, and is idempotent. The stored limit stays.
func (s *Semaphore) Close() error {
	err := s.owner.Close()
	if s.unsub != nil {
		s.unsub()
	}
	s.met.Forget(s.cfg.Namespace, s.label)
	return err
}
