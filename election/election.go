package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/queue"
)

// Election is a named leader election. Candidates queue in the order they
// campaigned; the oldest leads. An Election is safe for concurrent use.
type Election struct {
	cli      *clientv3.Client
	name     string
	prefix   string
	cfg      config.Config
	met      *metrics.Metrics
	log      *zap.Logger
	sessions *lease.Provider
	bg       sync.WaitGroup // cleanups and observers

	mu     sync.Mutex
	terms  map[*Term]struct{}
	closed bool
}

// New returns an Election for name in the configured namespace. It does
// not contact etcd: the lease is granted by the first Campaign. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Election, error) {
	if err := keys.ValidateName("election name", name); err != nil {
		return nil, err
	}
	cfg, err := config.Build(cli, build(opts))
	if err != nil {
		return nil, err
	}
	met, err := cfg.Metrics()
	if err != nil {
		return nil, err
	}
	e := &Election{
		cli: cli, name: name, prefix: keys.Prefix(cfg.Namespace, keys.Election, name), cfg: cfg, met: met,
		log:   cfg.Logger.With(zap.String("name", name), zap.String("namespace", cfg.Namespace)),
		terms: make(map[*Term]struct{}),
	}
	e.sessions = lease.NewProvider(cli, cfg.Session, cfg.LeaseConfig(met.RenewalFailed(cfg.Namespace, name), nil))
	return e, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Namespace returns the election's namespace.
func (e *Election) Namespace() string { return e.cfg.Namespace }

// Prefix returns the etcd prefix under which every candidate's key lives.
func (e *Election) Prefix() string { return e.prefix }

// Campaign queues value as a candidate and returns once it leads, ctx
// ends, or the Election is closed. It returns success only after reading,
// in the same revision that shows no older candidate, that its own key
// still exists with its original CreateRevision. ctx bounds the wait only:
// the Term's Context lives until leadership is lost or resigned. On error
// no key of this call is left in etcd.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	start := time.Now()
	t, err := e.campaign(ctx, value)
	result := "leader"
	switch {
	case err == nil:
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		result = "canceled"
	default:
		result = "error"
	}
	e.met.ObserveCampaign(e.cfg.Namespace, e.name, result, time.Since(start))
	return t, err
}

func (e *Election) campaign(ctx context.Context, value string) (*Term, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(e.sessions.ClosingContext(), func() { cancel(ErrClosed) })
	defer stop()

	s, err := e.sessions.Get(wctx)
	if err != nil {
		return nil, e.wrap(wctx, err)
	}
	r, err := queue.Acquire(wctx, queue.Request{
		Session: s, Prefix: e.prefix, Value: value,
		Background: &e.bg, Closing: e.sessions.Closing(), MaxHeld: e.cfg.MaxHeld,
	})
	if err != nil {
		return nil, e.wrap(wctx, err)
	}
	t := &Term{e: e, value: value}
	t.h = queue.NewHold(s, r, ErrNotLeader, queue.Hooks{OnEnd: t.ended, Background: &e.bg, Closing: e.sessions.Closing()})
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = t.h.Release(context.Background())
		return nil, ErrClosed
	}
	e.terms[t] = struct{}{}
	e.mu.Unlock()
	e.met.Leading(e.cfg.Namespace, e.name, true, "")
	e.log.Info("became leader", t.fields()...)
	return t, nil
}

func (e *Election) wrap(ctx context.Context, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(context.Cause(ctx), ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("election %q: %w", e.name, err)
}

func (e *Election) forget(t *Term) {
	e.mu.Lock()
	delete(e.terms, t)
	e.mu.Unlock()
}

// Close resigns every term the Election holds (their Context ends with
// ErrReleased), ends every Observe channel, makes waiting and later
// Campaign calls return ErrClosed, and revokes the lease the Election
// created. It waits for every goroutine the Election started and is
// idempotent.
func (e *Election) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	terms := make([]*Term, 0, len(e.terms))
	for t := range e.terms {
		terms = append(terms, t)
	}
	clear(e.terms)
	e.mu.Unlock()

	var errsOut []error
	for _, t := range terms {
		if e.cfg.Session == nil {
			t.h.Abandon() // the revoke below deletes the key
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := t.h.Release(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
			errsOut = append(errsOut, err)
		}
		cancel()
	}
	if err := e.sessions.Close(); err != nil {
		errsOut = append(errsOut, err)
	}
	e.bg.Wait()
	return errors.Join(errsOut...)
}
