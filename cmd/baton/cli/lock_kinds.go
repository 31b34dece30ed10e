package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// `baton lock NAME --limit N` takes a permit of the semaphore NAME and
// `baton lock NAME --shared` a read lock of the read/write lock NAME. A
// mutex, a semaphore and a read/write lock are different kinds of key
// (/<ns>/v1/lock/, /semaphore/, /rwlock/): the same NAME under two kinds
// names two objects that never wait for each other.

// Kinds of hold as `baton lock` and `baton locks` name them.
const (
	kindMutex     = "mutex"
	kindSemaphore = "semaphore"
	kindRead      = "rwlock read"
	kindWrite     = "rwlock write"
)

// kindHold is a semaphore's *Permit or an rwmutex's *Lock.
type kindHold interface {
	hold
	Key() string
	Token() fencing.Token
	Lease() clientv3.LeaseID
	TTL() time.Duration
	Acquired() time.Time
	Context() context.Context
	Txn(ctx context.Context) clientv3.Txn
}

// kindLocker takes NAME as a semaphore or a read/write lock for lock.
type kindLocker struct {
	kind    keys.Kind // keys.Semaphore or keys.RWLock
	name    string
	ns      string
	prefix  string
	limit   int // semaphore only
	notHeld error
	busy    error // what the Try form returns when it cannot hold now
	acquire func(ctx context.Context, try bool) (kindHold, error)
	release func(ctx context.Context, h kindHold) error
	read    func(ctx context.Context) (holders, waiters []kindContender, err error)
	close   func() error
}

// kindContender is a holder or waiter as read from etcd.
type kindContender struct {
	Identity string
	Token    fencing.Token
	Lease    clientv3.LeaseID
}

// label names the object in status lines and errors: `semaphore "x"`.
func (k *kindLocker) label() string {
	if k.kind == keys.Semaphore {
		return kindSemaphore
	}
	return "rwlock"
}

// validateKindFlags checks --limit and --shared before connecting.
func validateKindFlags(cmd *cobra.Command, o lockOptions) error {
	limitSet := cmd.Flags().Changed("limit")
	switch {
	case limitSet && o.shared:
		return usageErrorf("--limit and --shared exclude each other: a semaphore has no readers")
	case limitSet && (o.limit < 1 || o.limit > semaphore.MaxLimit):
		return usageErrorf("--limit %d: must be 1 to %d", o.limit, semaphore.MaxLimit)
	}
	return nil
}

func newKindLocker(cli *clientv3.Client, g *globals, o lockOptions, name string, ms *metricsServer) (*kindLocker, error) {
	if o.limit > 0 {
		s, err := semaphore.New(cli, name, o.limit, semaphore.WithTTL(o.ttl), semaphore.WithNamespace(g.namespace),
			semaphore.WithRegisterer(ms.registerer()))
		if err != nil {
			return nil, err
		}
		return &kindLocker{
			kind: keys.Semaphore, name: name, ns: g.namespace, prefix: s.Prefix(), limit: o.limit,
			notHeld: semaphore.ErrNotHeld, busy: semaphore.ErrNoPermit,
			acquire: func(ctx context.Context, try bool) (kindHold, error) {
				acq := s.Acquire
				if try {
					acq = s.TryAcquire
				}
				p, err := acq(ctx)
				if err != nil {
					return nil, err
				}
				return p, nil
			},
			release: func(ctx context.Context, h kindHold) error { return h.(*semaphore.Permit).Release(ctx) },
			read: func(ctx context.Context) ([]kindContender, []kindContender, error) {
				hs, err := s.Holders(ctx)
				if err != nil {
					return nil, nil, err
				}
				ws, err := s.Waiters(ctx)
				conv := func(cs []semaphore.Contender) []kindContender {
					out := make([]kindContender, 0, len(cs))
					for _, c := range cs {
						out = append(out, kindContender{Identity: c.Identity, Token: c.Token, Lease: c.Lease})
					}
					return out
				}
				return conv(hs), conv(ws), err
			},
			close: s.Close,
		}, nil
	}
	rw, err := rwmutex.New(cli, name, rwmutex.WithTTL(o.ttl), rwmutex.WithNamespace(g.namespace),
		rwmutex.WithRegisterer(ms.registerer()))
	if err != nil {
		return nil, err
	}
	return &kindLocker{
		kind: keys.RWLock, name: name, ns: g.namespace, prefix: rw.Prefix(),
		notHeld: rwmutex.ErrNotHeld, busy: rwmutex.ErrLocked,
		acquire: func(ctx context.Context, try bool) (kindHold, error) {
			acq := rw.RLock
			if try {
				acq = rw.TryRLock
			}
			l, err := acq(ctx)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		release: func(ctx context.Context, h kindHold) error { return h.(*rwmutex.Lock).Unlock(ctx) },
		read: func(ctx context.Context) ([]kindContender, []kindContender, error) {
			hs, ws, err := readRW(ctx, rw)
			return hs, ws, err
		},
		close: rw.Close,
	}, nil
}

func readRW(ctx context.Context, rw *rwmutex.RWMutex) (holders, waiters []kindContender, err error) {
	hs, err := rw.Holders(ctx)
	if err != nil {
		return nil, nil, err
	}
	ws, err := rw.Waiters(ctx)
	for _, c := range hs {
		holders = append(holders, kindContender{Identity: c.Identity, Token: c.Token, Lease: c.Lease})
	}
	for _, c := range ws {
		waiters = append(waiters, kindContender{Identity: c.Identity, Token: c.Token, Lease: c.Lease})
	}
	return holders, waiters, err
}

// runKindLock is runLock for a semaphore permit or a read lock: the same
// supervisor, waiting, status and exit codes.
func runKindLock(cmd *cobra.Command, g *globals, o lockOptions, name string, argv []string) error {
	errOut := cmd.ErrOrStderr()
	c, err := newChild(g, argv, o.grace, cmd)
	if err != nil {
		return err
	}
	ms, err := startMetrics(o.metrics, o.grace)
	if err != nil {
		return err
	}
	defer ms.close()
	ictx, stop := interruptible(cmd.Context())
	defer stop()
	cli, err := g.client(cmd.Context())
	if err != nil {
		return err
	}
	defer cli.Close()
	k, err := newKindLocker(cli, g, o, name, ms)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer closeBounded(k.close)
	st := newStatusWriter(errOut, g.json(), k.label(), name)

	l, err := acquireKind(ictx, g, cli, k, o, st)
	if err != nil {
		return err
	}
	defer ms.track(l)()
	recordHeld(ictx, l.Txn, heldPut(g.namespace, k.kind, name, l.Lease(), l.Acquired()))
	st.acquired(heldView{Kind: string(k.kind), Name: name, Key: l.Key(), Token: int64(l.Token()),
		Lease: leaseHex(int64(l.Lease())), TTL: l.TTL(), Limit: k.limit, Shared: k.kind == keys.RWLock})
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
		defer cancel()
		return k.release(rctx, l)
	}
	what := k.label()

	if c == nil {
		select {
		case <-l.Done():
		case <-ictx.Done():
		}
		if err := lostError(l.Context(), what, name); err != nil {
			_ = release()
			st.lost(err, true)
			return err
		}
		if err := release(); err != nil {
			return kindLostOr(err, k, "release")
		}
		st.released()
		return nil
	}

	tok, err := g.childToken(l.Token())
	if err != nil {
		_ = release()
		return err
	}
	c.env = kindEnv(k, l, tok)
	if ierr := interruptedBeforeCommand(ictx, fmt.Sprintf("%s %q", what, name)); ierr != nil {
		if err := release(); err == nil {
			st.released()
		}
		return ierr
	}
	res, err := c.run(ictx, l)
	uerr := release()
	if err != nil {
		return err
	}
	if res.lost || res.cause != "" {
		lerr := withCode(ExitOwnershipLost, fmt.Errorf("%s %q lost while the command ran (%v); %s",
			what, name, lossCause(l.Context(), res), stoppedText(res, o.grace)))
		st.lost(lerr, true)
		return lerr
	}
	if uerr != nil {
		fmt.Fprintf(errOut, "baton: release %s %q: %v\n", what, name, uerr)
	} else {
		st.released()
	}
	return childStatus(res.status)
}

// kindEnv is the command's environment: that of a plain lock, and the
// kind (and limit) so the command can tell which guard its token needs.
func kindEnv(k *kindLocker, l kindHold, tok fencing.Token) []string {
	env := []string{
		"BATON_LOCK_NAME=" + k.name,
		"BATON_LOCK_KEY=" + l.Key(),
		"BATON_FENCING_TOKEN=" + tok.String(),
	}
	if k.kind == keys.Semaphore {
		return append(env, "BATON_LOCK_KIND=semaphore", "BATON_SEMAPHORE_LIMIT="+strconv.Itoa(k.limit))
	}
	return append(env, "BATON_LOCK_KIND=rwlock-read")
}

// kindLostOr maps a release's ErrNotHeld to ownership lost.
func kindLostOr(err error, k *kindLocker, what string) error {
	if errors.Is(err, mutex.ErrLost) || errors.Is(err, k.notHeld) {
		return withCode(ExitOwnershipLost, fmt.Errorf("%s %q: %s: %w", k.label(), k.name, what, err))
	}
	return fmt.Errorf("%s %q: %s: %w", k.label(), k.name, what, err)
}

// acquireKind is acquireLock for a semaphore or a read lock.
func acquireKind(ictx context.Context, g *globals, cli *clientv3.Client, k *kindLocker, o lockOptions, st *statusWriter) (kindHold, error) {
	what := fmt.Sprintf("%s %q", k.label(), k.name)
	if o.try {
		actx, cancel := g.opContext(ictx)
		defer cancel()
		l, err := k.acquire(actx, true)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, k.busy):
			who := ""
			hctx, hcancel := g.opContext(ictx)
			if hs, _, herr := k.read(hctx); herr == nil && len(hs) > 0 {
				who = " (" + holdersText(hs, k.limit) + ")"
			}
			hcancel()
			return nil, withCode(ExitNotAcquired, fmt.Errorf("%s: no %s free now%s", what, kindUnit(k), who))
		case errors.Is(err, semaphore.ErrLimitMismatch):
			return nil, withCode(ExitUsage, err)
		}
		if ierr := interruptedError(ictx, "%s: not acquired", what); ierr != nil {
			return nil, ierr
		}
		return nil, g.failed("acquire "+what, err)
	}

	actx, cancel := ictx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		actx, cancel = context.WithTimeout(ictx, o.timeout)
	}
	defer cancel()
	wctx, wcancel := context.WithCancel(actx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchQueue(wctx, cli, k.prefix, st, kindQueue(k))
	}()
	defer wg.Wait()
	defer wcancel()

	for attempt := 0; ; attempt++ {
		l, err := k.acquire(actx, false)
		if err == nil {
			return l, nil
		}
		switch {
		case ictx.Err() != nil:
			if ierr := interruptedError(ictx, "%s: not acquired", what); ierr != nil {
				return nil, ierr
			}
			return nil, withCode(ExitNotAcquired, fmt.Errorf("%s: interrupted before it was acquired", what))
		case actx.Err() != nil:
			return nil, withCode(ExitNotAcquired, fmt.Errorf("%s not acquired within %v", what, o.timeout))
		case errors.Is(err, semaphore.ErrLimitMismatch):
			return nil, withCode(ExitUsage, err)
		case !worthWaiting(err):
			return nil, g.failed("acquire "+what, err)
		}
		st.unreachableNow(err)
		if !sleepCtx(actx, waitBackoff(attempt)) {
			continue // the next acquire returns at once with actx's end
		}
	}
}

func kindUnit(k *kindLocker) string {
	if k.kind == keys.Semaphore {
		return fmt.Sprintf("permit (limit %d)", k.limit)
	}
	return "read lock: a writer holds or waits"
}

// holdersText names the holders for a status line: their identities, and
// how many of the limit for a semaphore.
func holdersText(hs []kindContender, limit int) string {
	ids := make([]string, 0, len(hs))
	for _, h := range hs {
		ids = append(ids, safe(dash(h.Identity)))
	}
	s := strings.Join(ids, ", ")
	if limit > 0 {
		return fmt.Sprintf("%d of %d permits held by %s", len(hs), limit, s)
	}
	return "held by " + s
}

// kindQueue reads the oldest holder and the waiters ahead of this
// process, found by its identity as the libraries write it.
func kindQueue(k *kindLocker) func(ctx context.Context) (queueState, bool, error) {
	self := holderIdentity()
	return func(ctx context.Context) (queueState, bool, error) {
		hs, ws, err := k.read(ctx)
		if err != nil || len(hs) == 0 {
			return queueState{}, false, err
		}
		for _, h := range hs {
			if h.Identity == self {
				return queueState{}, false, nil
			}
		}
		ahead := 0
		for _, w := range ws {
			if w.Identity == self {
				break
			}
			ahead++
		}
		ids := make([]string, 0, len(hs))
		for _, h := range hs {
			ids = append(ids, h.Identity)
		}
		return queueState{holder: strings.Join(ids, ", "), token: int64(hs[0].Token), heldFor: -1, ahead: ahead}, true, nil
	}
}

func addKindFlags(f *pflag.FlagSet, o *lockOptions) {
	f.IntVar(&o.limit, "limit", 0, "take one of N permits of the semaphore NAME instead of the lock NAME (at most N holders at once)")
	f.BoolVar(&o.shared, "shared", false, "take a read lock of the read/write lock NAME instead of the lock NAME (readers hold together)")
}

// heldWhat is how a hold is introduced on the status line.
func heldWhat(v heldView) string {
	switch {
	case v.Kind == string(keys.Election):
		return "leading election"
	case v.Kind == string(keys.Semaphore):
		return fmt.Sprintf("holding a permit (limit %d) of semaphore", v.Limit)
	case v.Shared:
		return "holding a read lock of rwlock"
	}
	return "holding lock"
}
