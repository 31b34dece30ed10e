package lease

import (
	"context"
	"errors"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/errs"
)

// Provider hands out the session of one mutex or election: its own lease,
// granted on first use and replaced once lost, or a borrowed session, which
// cannot be replaced.
type Provider struct {
	cli      *clientv3.Client
	cfg      Config
	borrowed *concurrency.Session

	closeCtx    context.Context
	closeCancel context.CancelFunc

	mu     sync.Mutex
	cur    *Session
	closed bool
	wg     sync.WaitGroup // revokes of replaced sessions
}

// NewProvider returns a provider; borrowed is nil for an owned lease.
func NewProvider(cli *clientv3.Client, borrowed *concurrency.Session, cfg Config) *Provider {
	ctx, cancel := context.WithCancel(context.Background())
	return &Provider{cli: cli, cfg: cfg, borrowed: borrowed, closeCtx: ctx, closeCancel: cancel}
}

// Closing is done once Close has begun.
func (p *Provider) Closing() <-chan struct{} { return p.closeCtx.Done() }

// ClosingContext is done once Close has begun.
func (p *Provider) ClosingContext() context.Context { return p.closeCtx }

// Get returns a live session, granting a new lease if there is none. ctx
// bounds the grant.
func (p *Provider) Get(ctx context.Context) (*Session, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errs.ErrClosed
	}
	if p.cur != nil && !p.cur.Lost() {
		defer p.mu.Unlock()
		return p.cur, nil
	}
	p.mu.Unlock()
	return p.replace(ctx)
}

// replace grants (or borrows) a session when there is none or it is lost;
// Close cancels it.
func (p *Provider) replace(ctx context.Context) (*Session, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.closeCtx, cancel)
	defer stop()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errs.ErrClosed
	}
	if p.cur != nil && !p.cur.Lost() {
		return p.cur, nil // another caller replaced it meanwhile
	}
	if p.borrowed != nil {
		// The watchdog gave up on the lease (renewals failed, validity
		// passed): if the caller's session still lives, watch it afresh.
		if old := p.cur; old != nil {
			p.cur = nil
			_ = old.Close()
		}
		s, err := Borrow(ctx, p.borrowed, p.cfg)
		if err != nil {
			return nil, p.closedOr(err)
		}
		p.cur = s
		return s, nil
	}
	p.cur = nil // a lost one is being retired
	s, err := Grant(ctx, p.cli, p.cfg)
	if err != nil {
		return nil, p.closedOr(err)
	}
	p.cur = s
	// Once lost, the lease may still exist on the server (a partition that
	// heals, a new etcd leader renewing every lease): revoke it as soon as
	// etcd answers, off every caller's path, so its keys do not block others.
	context.AfterFunc(s.Context(), func() {
		if errors.Is(context.Cause(s.Context()), errs.ErrReleased) {
			return // closed on purpose
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed {
			return // Close takes care of it
		}
		if p.cur == s {
			p.cur = nil
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = s.CloseLost(p.closeCtx)
		}()
	})
	return s, nil
}

func (p *Provider) closedOr(err error) error {
	if p.closeCtx.Err() != nil {
		return errs.ErrClosed
	}
	return err
}

// Close ends the session (revoking an owned lease) and waits for every
// goroutine the provider started. It is idempotent.
func (p *Provider) Close() error {
	p.closeCancel()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	cur := p.cur
	p.mu.Unlock()
	var err error
	if cur != nil {
		err = cur.Close()
	}
	p.wg.Wait()
	return err
}
