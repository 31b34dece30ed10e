package rwmutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// RWMutex is a named distributed read/write lock: any number of readers,
// or one writer. RLock, TryRLock, Lock and TryLock return a *Lock for each
// acquisition. An RWMutex is safe for concurrent use, and one RWMutex may
// hold several read locks at once (one per call).
type RWMutex struct {
	cli     *clientv3.Client
	name    string
	label   string
	prefix  string
	cfg     config.Config
	met     *metrics.Metrics
	log     *zap.Logger
	value   string
	readers *core.Owner[*Lock]
	writers *core.Owner[*Lock]
	unsub   func()
}

// IsReader reports whether a key of an RWMutex is a reader's.
func IsReader(key string) bool { return keys.TagOf(key) == keys.TagRead }

// readerPolicy lets a reader hold once no older writer remains; any key
// that is not a reader's counts as a writer. Writers need no policy: like
// a mutex's key, they wait for every older key.
type readerPolicy struct{}

func (readerPolicy) Blockers(_ string, older []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) {
	var writers []*mvccpb.KeyValue
	for _, kv := range older {
		if !IsReader(string(kv.Key)) {
			writers = append(writers, kv)
		}
	}
	return writers, 0
}

// New returns an RWMutex for name in the configured namespace. It does not
// contact etcd. Invalid names and options are rejected with an error
// wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*RWMutex, error) {
	return newRWMutex(cli, name, readerPolicy{}, opts)
}

func newRWMutex(cli *clientv3.Client, name string, readers core.Policy, opts []Option) (*RWMutex, error) {
	if err := keys.ValidateName("rwmutex name", name); err != nil {
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
	rw := &RWMutex{
		cli: cli, name: name, label: "rwmutex:" + name, prefix: keys.Prefix(cfg.Namespace, keys.RWLock, name),
		cfg: cfg, met: met, value: value,
		log: cfg.Session.Logger.With(zap.String("name", name), zap.String("namespace", cfg.Namespace)),
	}
	if cfg.MetricLabel != "" {
		rw.label = cfg.MetricLabel
	}
	sess, own := cfg.NewSession(cli)
	if fn := met.RenewalFailed(cfg.Namespace, rw.label); fn != nil {
		rw.unsub = sess.OnRenewalFailure(fn)
	}
	rw.readers = core.NewOwner[*Lock](sess, core.OwnerConfig{
		Prefix: rw.prefix, NotHeld: ErrNotHeld, Policy: readers, Tag: keys.TagRead, Events: (*events)(rw),
	})
	rw.writers = core.NewOwner[*Lock](sess, core.OwnerConfig{
		Prefix: rw.prefix, NotHeld: ErrNotHeld, OwnSession: own, Tag: keys.TagWrite, Events: (*events)(rw),
	})
	return rw, nil
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// Namespace returns the lock's namespace.
func (rw *RWMutex) Namespace() string { return rw.cfg.Namespace }

// Prefix returns the etcd prefix under which every contender's key lives.
func (rw *RWMutex) Prefix() string { return rw.prefix }

// RLock waits until it holds a read lock: until no writer that came
// before it holds or waits. ctx bounds the wait only. On error no key of
// this call is left in etcd.
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
	start := time.Now()
	o := rw.writers
	if shared {
		o = rw.readers
	}
	l, err := o.Acquire(ctx, rw.value, try, func(h *core.Hold) *Lock { return &Lock{rw: rw, o: o, h: h, shared: shared} })
	result := "acquired"
	switch {
	case err == nil:
		if rw.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			rw.log.Debug("lock acquired", append(l.h.LogFields(), zap.Bool("shared", shared))...)
		}
	case errors.Is(err, core.ErrBusy):
		err, result = fmt.Errorf("%w: %q", ErrLocked, rw.name), "locked"
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		result = "canceled"
	default:
		result = "error"
	}
	rw.met.ObserveAcquire(rw.cfg.Namespace, rw.label, result, time.Since(start))
	return l, err
}

// Held returns the locks this RWMutex holds, read locks first, each kind
// in token order, including one whose Context a loss has ended (its
// Unlock is still due).
func (rw *RWMutex) Held() []*Lock { return append(rw.readers.Held(), rw.writers.Held()...) }

// Close releases every lock the RWMutex holds (their Context ends with
// ErrReleased), makes waiting and later calls return ErrClosed, and
// revokes the lease the RWMutex created (a shared session is left open).
// It deletes the RWMutex's metric series, waits for every goroutine it
// started, and is idempotent.
func (rw *RWMutex) Close() error {
	rw.readers.Refuse()
	rw.writers.Refuse()
	err := errors.Join(rw.readers.Close(), rw.writers.Close())
	if rw.unsub != nil {
		rw.unsub()
	}
	rw.met.Forget(rw.cfg.Namespace, rw.label)
	return err
}

// ended records a hold's end in metrics and logs.
// events is what the core tells an RWMutex (core.Events), kept out of
// the RWMutex's methods.
type events RWMutex

func (e *events) Label() string      { return fmt.Sprintf("rwmutex %q", e.name) }
func (e *events) Started(*core.Hold) {}
func (e *events) Ended(h *core.Hold, cause error, held time.Duration) {
	rw := (*RWMutex)(e)
	if errors.Is(cause, ErrReleased) {
		rw.met.HoldEnded(rw.cfg.Namespace, rw.label, held, "")
		if rw.log.Core().Enabled(zap.DebugLevel) { // the fields cost even when dropped
			rw.log.Debug("lock released", h.LogFields()...)
		}
		return
	}
	rw.met.HoldEnded(rw.cfg.Namespace, rw.label, held, errs.Reason(cause))
	rw.log.Warn("lock lost", append(h.LogFields(), zap.Error(cause))...)
}
