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
	owner    *queue.Owner[*Term]
	bg       sync.WaitGroup // observers
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
		log: cfg.Logger.With(zap.String("name", name), zap.String("namespace", cfg.Namespace)),
	}
	e.sessions = lease.NewProvider(cli, cfg.Session, cfg.LeaseConfig(met.RenewalFailed(cfg.Namespace, name)))
	e.owner = queue.NewOwner[*Term](e.sessions, queue.OwnerConfig{
		Label: fmt.Sprintf("election %q", name), Prefix: e.prefix, MaxHeld: cfg.MaxHeld,
		NotHeld: ErrNotLeader, BorrowedSession: cfg.Session != nil,
	})
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
	t, err := e.owner.Acquire(ctx, value, false, func(h *queue.Hold) *Term { return &Term{e: e, h: h, value: value} }, e.ended)
	if err != nil {
		return nil, err
	}
	e.met.Leading(e.cfg.Namespace, e.name, true, "")
	e.log.Info("became leader", t.h.LogFields()...)
	return t, nil
}

// Close resigns every term the Election holds (their Context ends with
// ErrReleased), ends every Observe channel, makes waiting and later
// Campaign calls return ErrClosed, and revokes the lease the Election
// created. It waits for every goroutine the Election started and is
// idempotent.
func (e *Election) Close() error {
	err := e.owner.Close() // also ends every Observe
	e.bg.Wait()
	return err
}
