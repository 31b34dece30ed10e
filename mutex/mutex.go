package mutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// Mutex is a named distributed lock. Lock and TryLock return a *Lock for
// each acquisition. A Mutex is safe for concurrent use: goroutines that
// lock it at once exclude each other like separate processes do.
type Mutex struct {
	// A Mutex costs every lock held (a service may hold one lock on
	// each of 10,000 Mutexes): the client is the session's.
	name   string
	label  string // metrics' name label
	prefix string
	ns     string
	met    *metrics.Metrics
	log    *zap.Logger
	value  string
	owner  *core.Owner[*Lock]
	unsub  func()
}

// New returns a Mutex for name in the configured namespace. It does not
// contact etcd: the lease is granted by the first Lock or TryLock. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Mutex, error) {
	if err := keys.ValidateName("mutex name", name); err != nil {
		return nil, err
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
	m := &Mutex{
		name: name, label: name, prefix: keys.Prefix(cfg.Namespace, keys.Lock, name), ns: cfg.Namespace, met: met,
		log: cfg.Session.Logger, value: value,
	}
	if cfg.MetricLabel != "" {
		m.label = cfg.MetricLabel
	}
	sess, own := cfg.NewSession(cli)
	if fn := met.RenewalFailed(cfg.Namespace, m.label); fn != nil {
		m.unsub = sess.OnRenewalFailure(fn)
	}
	m.owner = core.NewOwner[*Lock](sess, core.OwnerConfig{
		Prefix: m.prefix, NotHeld: ErrNotHeld, OwnSession: own, Events: (*events)(m),
	})
	return m, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

func (m *Mutex) cli() *clientv3.Client { return m.owner.Session().Client() }

// Namespace returns the lock's namespace.
func (m *Mutex) Namespace() string { return m.ns }

// Prefix returns the etcd prefix under which every contender's key lives.
func (m *Mutex) Prefix() string { return m.prefix }

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
	start := time.Now()
	l, err := m.owner.Acquire(ctx, m.value, try, func(h *core.Hold) *Lock { return &Lock{m: m, h: h} })
	result := "acquired"
	switch {
	case err == nil:
		if m.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			m.log.Debug("lock acquired", m.fields(l.h.LogFields()...)...)
		}
	case errors.Is(err, core.ErrBusy):
		err, result = fmt.Errorf("%w: %q", ErrLocked, m.name), "locked"
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		result = "canceled"
	default:
		result = "error"
	}
	m.met.ObserveAcquire(m.ns, m.label, result, time.Since(start))
	return l, err
}

// Close releases every lock the Mutex holds (their Context ends with
// ErrReleased), makes waiting and later Lock calls return ErrClosed, and
// revokes the lease the Mutex created (a shared session is left open). It
// deletes the Mutex's metric series, waits for every goroutine the Mutex
// started, and is idempotent.
func (m *Mutex) Close() error {
	err := m.owner.Close()
	if m.unsub != nil {
		m.unsub()
	}
	m.met.Forget(m.ns, m.label)
	return err
}

// fields are a log line's fields with the lock's name and namespace; the
// logger is not cloned per Mutex, which would cost every held lock.
func (m *Mutex) fields(f ...zap.Field) []zap.Field {
	return append(f, zap.String("name", m.name), zap.String("namespace", m.ns))
}
