package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// Impl is one of the implementations compared: baton, or etcd's
// concurrency package used the way its documentation shows.
type Impl interface {
	Name() string
	// NewMutex returns a lock on name. With sess nil it has its own lease
	// of the given TTL, closed by Close; otherwise it uses sess.
	NewMutex(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Mutex, error)
	// NewElection returns an election on name, with sess as in NewMutex.
	NewElection(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Election, error)
}

// Mutex is a lock of either implementation. A Mutex of the raw
// implementation must not be locked by two goroutines at once.
type Mutex interface {
	Lock(ctx context.Context) (Held, error)
	// Prefix is the prefix under which every contender's key lives.
	Prefix() string
	Close() error
}

// Held is one acquisition.
type Held interface {
	Unlock(ctx context.Context) error
	// Done closes when the holder is told ownership may be gone: baton's
	// Lock.Done, or the raw session's Done.
	Done() <-chan struct{}
}

// Election is an election of either implementation.
type Election interface {
	Campaign(ctx context.Context, value string) (Term, error)
	// Observe sends the leader's key ("" for none) at every change.
	Observe(ctx context.Context) <-chan string
	Prefix() string
	Close() error
}

// Term is one leadership.
type Term interface {
	Resign(ctx context.Context) error
	Key() string
}

// Impls are the implementations compared, baton first.
var Impls = []Impl{Baton{shared: &SharedSessions{}}, Raw{}}

// Namespace keeps the measurements' keys apart from anything else.
const Namespace = "bench"

// Baton is this module's mutex and election packages. Mutexes and
// elections given one etcd session share one baton session on it
// (session.Wrap), as a service holding many locks would.
type Baton struct {
	shared *SharedSessions
	opts   []mutex.Option // added to every Mutex's options
}

// With is b with opts added to every Mutex's options.
func (b Baton) With(opts ...mutex.Option) Baton {
	b.opts = append(append([]mutex.Option(nil), b.opts...), opts...)
	return b
}

// SharedSessions maps an etcd session to the baton session wrapping it,
// closed when the etcd session ends. The zero value is ready.
type SharedSessions struct {
	mu sync.Mutex
	m  map[*concurrency.Session]*bsession.Session
}

// Get is the baton session wrapping cs, made on first use.
func (s *SharedSessions) Get(cs *concurrency.Session) (*bsession.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bs, ok := s.m[cs]; ok {
		return bs, nil
	}
	bs, err := bsession.Wrap(cs)
	if err != nil {
		return nil, err
	}
	if s.m == nil {
		s.m = make(map[*concurrency.Session]*bsession.Session)
	}
	s.m[cs] = bs
	context.AfterFunc(cs.Ctx(), func() {
		s.mu.Lock()
		delete(s.m, cs)
		s.mu.Unlock()
		_ = bs.Close()
	})
	return bs, nil
}

// Name is "baton".
func (Baton) Name() string { return "baton" }

// NewMutex returns a mutex.Mutex.
func (b Baton) NewMutex(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Mutex, error) {
	opts := append([]mutex.Option{mutex.WithNamespace(Namespace)}, b.opts...)
	if sess != nil {
		bs, err := b.shared.Get(sess)
		if err != nil {
			return nil, err
		}
		opts = append(opts, mutex.WithSession(bs))
	} else {
		opts = append(opts, mutex.WithTTL(ttl))
	}
	m, err := mutex.New(cli, name, opts...)
	if err != nil {
		return nil, err
	}
	return batonMutex{m}, nil
}

// NewElection returns an election.Election.
func (b Baton) NewElection(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Election, error) {
	opts := []election.Option{election.WithNamespace(Namespace)}
	if sess != nil {
		bs, err := b.shared.Get(sess)
		if err != nil {
			return nil, err
		}
		opts = append(opts, election.WithSession(bs))
	} else {
		opts = append(opts, election.WithTTL(ttl))
	}
	e, err := election.New(cli, name, opts...)
	if err != nil {
		return nil, err
	}
	return batonElection{e}, nil
}

type batonMutex struct{ m *mutex.Mutex }

func (b batonMutex) Lock(ctx context.Context) (Held, error) {
	l, err := b.m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l, nil
}
func (b batonMutex) Prefix() string { return b.m.Prefix() }
func (b batonMutex) Close() error   { return b.m.Close() }

type batonElection struct{ e *election.Election }

func (b batonElection) Campaign(ctx context.Context, value string) (Term, error) {
	t, err := b.e.Campaign(ctx, value)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (b batonElection) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 16)
	in := b.e.Observe(ctx)
	go func() {
		defer close(out)
		for l := range in {
			select {
			case out <- l.Key:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
func (b batonElection) Prefix() string { return b.e.Prefix() }
func (b batonElection) Close() error   { return b.e.Close() }

// Raw is etcd's client/v3/concurrency: Session, Mutex and Election.
type Raw struct{}

// Name is "raw".
func (Raw) Name() string { return "raw" }

// rawPrefix mirrors baton's key layout.
func rawPrefix(kind, name string) string { return fmt.Sprintf("/%s-raw/%s/%s", Namespace, kind, name) }

func rawSession(cli *clientv3.Client, sess *concurrency.Session, ttl time.Duration) (*concurrency.Session, bool, error) {
	if sess != nil {
		return sess, false, nil
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	return s, true, err
}

// NewMutex returns a concurrency.Mutex, on a new session if sess is nil.
func (Raw) NewMutex(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Mutex, error) {
	s, own, err := rawSession(cli, sess, ttl)
	if err != nil {
		return nil, err
	}
	pfx := rawPrefix("lock", name)
	return &rawMutex{s: s, own: own, pfx: pfx, m: concurrency.NewMutex(s, pfx)}, nil
}

// NewElection returns a concurrency.Election, on a new session if sess is
// nil.
func (Raw) NewElection(cli *clientv3.Client, sess *concurrency.Session, name string, ttl time.Duration) (Election, error) {
	s, own, err := rawSession(cli, sess, ttl)
	if err != nil {
		return nil, err
	}
	pfx := rawPrefix("election", name)
	return &rawElection{s: s, own: own, pfx: pfx, e: concurrency.NewElection(s, pfx)}, nil
}

type rawMutex struct {
	s   *concurrency.Session
	own bool
	pfx string
	m   *concurrency.Mutex
}

func (r *rawMutex) Lock(ctx context.Context) (Held, error) {
	if err := r.m.Lock(ctx); err != nil {
		return nil, err
	}
	return rawHeld{r}, nil
}
func (r *rawMutex) Prefix() string { return r.pfx + "/" }
func (r *rawMutex) Close() error {
	if r.own {
		return r.s.Close()
	}
	return nil
}

type rawHeld struct{ r *rawMutex }

func (h rawHeld) Unlock(ctx context.Context) error { return h.r.m.Unlock(ctx) }
func (h rawHeld) Done() <-chan struct{}            { return h.r.s.Done() }

type rawElection struct {
	s   *concurrency.Session
	own bool
	pfx string
	e   *concurrency.Election
}

func (r *rawElection) Campaign(ctx context.Context, value string) (Term, error) {
	if err := r.e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return rawTerm{r.e}, nil
}

func (r *rawElection) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 16)
	in := r.e.Observe(ctx)
	go func() {
		defer close(out)
		for resp := range in {
			key := ""
			if len(resp.Kvs) > 0 {
				key = string(resp.Kvs[0].Key)
			}
			select {
			case out <- key:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
func (r *rawElection) Prefix() string { return r.pfx + "/" }
func (r *rawElection) Close() error {
	if r.own {
		return r.s.Close()
	}
	return nil
}

type rawTerm struct{ e *concurrency.Election }

func (t rawTerm) Resign(ctx context.Context) error { return t.e.Resign(ctx) }
func (t rawTerm) Key() string                      { return t.e.Key() }

// CloseAll closes the mutexes (revoking their leases) a few at a time.
func CloseAll(mus []Mutex) {
	next := make(chan Mutex)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				_ = m.Close()
			}
		}()
	}
	for _, m := range mus {
		if m != nil {
			next <- m
		}
	}
	close(next)
	wg.Wait()
}

// WaitTurn starts a waiter on wg: a goroutine that locks m with ctx,
// calls held while it holds the lock, and unlocks it with ctx. An error of
// Lock or Unlock goes to errs, which must have room for it.
func WaitTurn(ctx context.Context, wg *sync.WaitGroup, m Mutex, errs chan<- error, held func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		h, err := m.Lock(ctx)
		if err != nil {
			errs <- err
			return
		}
		held()
		if err := h.Unlock(ctx); err != nil {
			errs <- err
		}
	}()
}

// JoinErrors closes errs and joins the errors in it; nil if none.
func JoinErrors(errs chan error) error {
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}
