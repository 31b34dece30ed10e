package election

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// Election is a named leader election. Candidates queue in the order they
// campaigned; the oldest leads. An Election is safe for concurrent use.
type Election struct {
	cli    *clientv3.Client
	name   string
	label  string // metrics' name label
	prefix string
	cfg    config.Config
	met    *metrics.Metrics
	log    *zap.Logger
	owner  *core.Owner[*Term]
	unsub  func()
}

// New returns an Election for name in the configured namespace. It does
// not contact etcd: the lease is granted by the first Campaign. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Election, error) {
	if err := keys.ValidateName("election name", name); err != nil {
		return nil, err
	}
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return nil, err
	}
	met, err := cfg.Metrics()
	if err != nil {
		return nil, err
	}
	e := &Election{
		cli: cli, name: name, label: name, prefix: keys.Prefix(cfg.Namespace, keys.Election, name), cfg: cfg, met: met,
		log: cfg.Session.Logger.With(zap.String("name", name), zap.String("namespace", cfg.Namespace)),
	}
	if cfg.MetricLabel != "" {
		e.label = cfg.MetricLabel
	}
	sess, own := cfg.NewSession(cli)
	if fn := met.RenewalFailed(cfg.Namespace, e.label); fn != nil {
		e.unsub = sess.OnRenewalFailure(fn)
	}
	e.owner = core.NewOwner[*Term](sess, core.OwnerConfig{
		Prefix: e.prefix, NotHeld: ErrNotLeader, OwnSession: own, Events: (*events)(e),
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
// ends, or the Election is closed (ErrClosed). It returns success only
// after reading, in the same revision that shows no older candidate, that
// its own key still exists with its original CreateRevision. ctx bounds
// the wait only: the Term's Context lives until leadership is lost or
// resigned. On error no key of this call is left in etcd. A refusal by
// etcd (permission denied, authentication failed, invalid request) is
// returned at once.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	start := time.Now()
	t, err := e.owner.Acquire(ctx, value, false, func(h *core.Hold) *Term { return &Term{e: e, h: h, value: value} })
	result := "leader"
	switch {
	case err == nil:
		e.log.Info("became leader", t.h.LogFields()...)
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		result = "canceled"
	default:
		result = "error"
	}
	e.met.ObserveCampaign(e.cfg.Namespace, e.label, result, time.Since(start))
	return t, err
}

// Close resigns every term the Election holds (their Context ends with
// ErrReleased), ends every Observe channel, makes waiting and later
// Campaign calls return ErrClosed, and revokes the lease the Election
// created (a shared session is left open). It deletes the Election's
// metric series, waits for every goroutine the Election started, and is
// idempotent.
func (e *Election) Close() error {
	err := e.owner.Close()
	if e.unsub != nil {
		e.unsub()
	}
	e.met.Forget(e.cfg.Namespace, e.label)
	return err
}
