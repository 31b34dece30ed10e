package serve

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/session"
)

// sessions is one baton session (one etcd lease) per TTL, shared by every
// hold of that TTL: a hold costs its keys and no lease of its own, and one
// renewal per TTL/3 keeps them all. TTLs are whole seconds up to
// --max-ttl, so there are at most that many sessions; each lives until
// the server stops. A caller's liveness is its heartbeats, not the lease:
// the lease only outlives a server that died.
type sessions struct {
	cli    *clientv3.Client
	maxTTL time.Duration
	reg    prometheus.Registerer
	log    *zap.Logger
	tp     trace.TracerProvider // nil: the library's default (the global one)

	mu     sync.Mutex
	byTTL  map[time.Duration]*session.Session
	closed bool
}

var errClosing = errors.New("the server is shutting down")

func newSessions(cli *clientv3.Client, maxTTL time.Duration, reg prometheus.Registerer, log *zap.Logger, tp trace.TracerProvider) *sessions {
	return &sessions{cli: cli, maxTTL: maxTTL, reg: reg, log: log, tp: tp, byTTL: make(map[time.Duration]*session.Session)}
}

// get returns the session of ttl, created on first use (it grants its
// lease on the first Lock).
func (s *sessions) get(ttl time.Duration) (*session.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosing
	}
	if ss, ok := s.byTTL[ttl]; ok {
		return ss, nil
	}
	ss, err := session.New(s.cli, s.options(ttl)...)
	if err != nil {
		return nil, err
	}
	s.byTTL[ttl] = ss
	return ss, nil
}

// own returns a new session of ttl for one hold, which closes it.
func (s *sessions) own(ttl time.Duration) (*session.Session, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosing
	}
	return session.New(s.cli, s.options(ttl)...)
}

func (s *sessions) options(ttl time.Duration) []session.Option {
	opts := []session.Option{session.WithTTL(ttl), session.WithMaxTTL(s.maxTTL), session.WithLogger(s.log)}
	if s.reg != nil {
		opts = append(opts, session.WithRegisterer(s.reg))
	}
	if s.tp != nil {
		opts = append(opts, session.WithTracerProvider(s.tp))
	}
	return opts
}

// close revokes every lease: whatever a hold left is deleted with it.
func (s *sessions) close() error {
	s.mu.Lock()
	s.closed = true
	all := make([]*session.Session, 0, len(s.byTTL))
	for _, ss := range s.byTTL {
		all = append(all, ss)
	}
	s.mu.Unlock()
	var errs []error
	for _, ss := range all {
		errs = append(errs, ss.Close())
	}
	return errors.Join(errs...)
}
