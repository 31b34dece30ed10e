package serve

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/session"
)

// sessions are the baton sessions (etcd leases) that holds share, a few
// per TTL: a hold costs its keys and no lease of its own, and one renewal
// per TTL/3 keeps every hold of a session. Holds of one name on one
// session would share its key and queue in this process, so that a
// release hands over only once the next holder put its key (one more etcd
// write): a hold takes the first session of its TTL where none of its
// names is held or waited for, up to maxSharedPerTTL sessions, and only
// then queues on the least used one. A waiter on a session of its own is
// queued in etcd, and holds once the holder's key is deleted, as the
// library's contenders do. Sessions beyond a TTL's first are closed once
// unused for idleSession. A caller's liveness is its heartbeats, not the
// lease: the lease only outlives a server that died.
type sessions struct {
	cli    *clientv3.Client
	maxTTL time.Duration
	reg    prometheus.Registerer
	log    *zap.Logger
	tp     trace.TracerProvider // nil: the library's default (the global one)

	mu     sync.Mutex
	byTTL  map[time.Duration][]*shared
	closed bool
}

// maxSharedPerTTL bounds the sessions holds of one TTL share.
const maxSharedPerTTL = 8

// idleSession is how long a TTL's extra session lives unused.
const idleSession = time.Minute

// shared is one session and the names its holds use.
type shared struct {
	sess  *session.Session
	names map[string]int // kind/name → holds (held or waiting)
	holds int
	idle  *time.Timer // closes an extra session unused since it was set
}

var errClosing = errors.New("the server is shutting down")

func newSessions(cli *clientv3.Client, maxTTL time.Duration, reg prometheus.Registerer, log *zap.Logger, tp trace.TracerProvider) *sessions {
	return &sessions{cli: cli, maxTTL: maxTTL, reg: reg, log: log, tp: tp, byTTL: make(map[time.Duration][]*shared)}
}

// take returns a session of ttl for a hold of names (each "kind/name"),
// and the func the hold calls once it ended (its keys deleted).
func (s *sessions) take(ttl time.Duration, names []string) (*session.Session, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errClosing
	}
	pool := s.byTTL[ttl]
	var pick *shared
	for _, sh := range pool {
		if sh.free(names) {
			pick = sh
			break
		}
	}
	if pick == nil && len(pool) < maxSharedPerTTL {
		ss, err := session.New(s.cli, s.options(ttl)...)
		if err != nil {
			return nil, nil, err
		}
		pick = &shared{sess: ss, names: make(map[string]int)}
		s.byTTL[ttl] = append(pool, pick)
	}
	if pick == nil {
		pick = pool[0]
		for _, sh := range pool[1:] {
			if sh.holds < pick.holds {
				pick = sh
			}
		}
	}
	if pick.idle != nil {
		pick.idle.Stop()
		pick.idle = nil
	}
	pick.holds++
	for _, n := range names {
		pick.names[n]++
	}
	var once sync.Once
	return pick.sess, func() { once.Do(func() { s.done(ttl, pick, names) }) }, nil
}

func (sh *shared) free(names []string) bool {
	for _, n := range names {
		if sh.names[n] > 0 {
			return false
		}
	}
	return true
}

// done counts a hold of sh out.
func (s *sessions) done(ttl time.Duration, sh *shared, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if sh.names[n]--; sh.names[n] == 0 {
			delete(sh.names, n)
		}
	}
	if sh.holds--; sh.holds > 0 || s.closed || s.byTTL[ttl][0] == sh {
		return
	}
	sh.idle = time.AfterFunc(idleSession, func() { s.retire(ttl, sh) })
}

// retire closes an extra session still unused.
func (s *sessions) retire(ttl time.Duration, sh *shared) {
	s.mu.Lock()
	if sh.holds > 0 || s.closed {
		s.mu.Unlock()
		return
	}
	pool := s.byTTL[ttl]
	i := slices.Index(pool, sh)
	if i < 0 {
		s.mu.Unlock()
		return
	}
	s.byTTL[ttl] = slices.Delete(pool, i, i+1)
	s.mu.Unlock()
	_ = sh.sess.Close()
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
	// KeysToDeadline: a lost lease's keys outlive the validity its holds'
	// callers were given (hold.go, end).
	opts := []session.Option{session.WithTTL(ttl), session.WithMaxTTL(s.maxTTL), session.WithLogger(s.log), config.KeysToDeadline()}
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
	var all []*session.Session
	for _, pool := range s.byTTL {
		for _, sh := range pool {
			if sh.idle != nil {
				sh.idle.Stop()
			}
			all = append(all, sh.sess)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, ss := range all {
		errs = append(errs, ss.Close())
	}
	return errors.Join(errs...)
}

// sessionOf is the library's session behind sess, for what only the
// service needs of it (its current lease's deadline).
func sessionOf(sess *session.Session) *core.Session {
	var c config.Config
	sess.Apply(&c)
	return c.Shared
}
