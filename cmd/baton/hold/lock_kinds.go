package hold

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/telemetry"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// `baton lock NAME --limit N` takes a permit of the semaphore NAME and
// `baton lock NAME --shared` a read lock of the read/write lock NAME. A
// mutex, a semaphore and a read/write lock are different kinds of key
// (/<ns>/v1/lock/, /semaphore/, /rwlock/): the same NAME under two kinds
// names two objects that never wait for each other.

// lockHold is a mutex's *Lock, a semaphore's *Permit or an rwmutex's
// *Lock.
type lockHold interface {
	supervise.Hold
	Key() string
	Token() fencing.Token
	Lease() clientv3.LeaseID
	TTL() time.Duration
	Acquired() time.Time
	Context() context.Context
	Txn(ctx context.Context) clientv3.Txn
}

// locker takes NAME as a lock, a semaphore or a read/write lock for
// baton lock.
type locker struct {
	kind    keys.Kind // keys.Lock, keys.Semaphore or keys.RWLock
	name    string
	names   []string // a set's (lock_set.go), else nil
	ns      string
	prefix  string
	limit   int // semaphore only
	notHeld error
	busy    error // what the Try form returns when it cannot hold now
	acquire func(ctx context.Context, try bool) (lockHold, error)
	release func(ctx context.Context, h lockHold) error
	// busyError is the --try error when busy, naming the holders.
	busyError func(ctx context.Context) error
	// queue reads the holders and the waiters ahead, for the status.
	queue func(ctx context.Context) (queueState, bool, error)
	close func() error
}

// kindContender is a holder or waiter as read from etcd.
type kindContender struct {
	Identity string
	Token    fencing.Token
	Lease    clientv3.LeaseID
}

// label names the object in status lines and errors: `semaphore "x"`.
func (k *locker) label() string {
	switch k.kind {
	case keys.Semaphore:
		return keyspace.KindSemaphore
	case keys.RWLock:
		return "rwlock"
	}
	return string(keys.Lock)
}

// validateKindFlags checks --limit and --shared before connecting.
func validateKindFlags(cmd *cobra.Command, o lockOptions) error {
	limitSet := cmd.Flags().Changed("limit")
	switch {
	case limitSet && o.shared:
		return cmdutil.UsageErrorf("--limit and --shared exclude each other: a semaphore has no readers")
	case limitSet && (o.limit < 1 || o.limit > semaphore.MaxLimit):
		return cmdutil.UsageErrorf("--limit %d: must be 1 to %d", o.limit, semaphore.MaxLimit)
	}
	return nil
}

// newLocker takes NAME as --limit and --shared say: a semaphore permit, a
// read lock, or else a plain lock.
func newLocker(cli *clientv3.Client, g *cmdutil.Env, o lockOptions, name string, ms *metricsServer) (*locker, error) {
	if o.limit == 0 && !o.shared {
		return newMutexLocker(cli, g, o, name, ms)
	}
	k, read, err := newKindLocker(cli, g, o, name, ms)
	if err != nil {
		return nil, err
	}
	k.queue = kindQueue(read)
	k.busyError = func(ctx context.Context) error {
		who := ""
		if hs, _, herr := read(ctx); herr == nil && len(hs) > 0 {
			who = " (" + holdersText(hs, k.limit) + ")"
		}
		return fmt.Errorf("%s %q: no %s free now%s", k.label(), k.name, kindUnit(k), who)
	}
	return k, nil
}

// contendersReader reads the holders and the waiters of a semaphore or a
// read/write lock.
type contendersReader func(ctx context.Context) (holders, waiters []kindContender, err error)

func newKindLocker(cli *clientv3.Client, g *cmdutil.Env, o lockOptions, name string, ms *metricsServer) (*locker, contendersReader, error) {
	if o.limit > 0 {
		s, err := semaphore.New(cli, name, o.limit, semaphore.WithTTL(o.ttl), semaphore.WithNamespace(g.Namespace),
			semaphore.WithRegisterer(ms.registerer()), semaphore.WithTracerProvider(o.tp), semaphore.WithLockDelay(o.delay))
		if err != nil {
			return nil, nil, err
		}
		read := func(ctx context.Context) ([]kindContender, []kindContender, error) {
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
		}
		return &locker{
			kind: keys.Semaphore, name: name, ns: g.Namespace, prefix: s.Prefix(), limit: o.limit,
			notHeld: semaphore.ErrNotHeld, busy: semaphore.ErrNoPermit,
			acquire: func(ctx context.Context, try bool) (lockHold, error) {
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
			release: func(ctx context.Context, h lockHold) error { return h.(*semaphore.Permit).Release(ctx) },
			close:   s.Close,
		}, read, nil
	}
	rw, err := rwmutex.New(cli, name, rwmutex.WithTTL(o.ttl), rwmutex.WithNamespace(g.Namespace),
		rwmutex.WithRegisterer(ms.registerer()), rwmutex.WithTracerProvider(o.tp), rwmutex.WithLockDelay(o.delay))
	if err != nil {
		return nil, nil, err
	}
	return &locker{
		kind: keys.RWLock, name: name, ns: g.Namespace, prefix: rw.Prefix(),
		notHeld: rwmutex.ErrNotHeld, busy: rwmutex.ErrLocked,
		acquire: func(ctx context.Context, try bool) (lockHold, error) {
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
		release: func(ctx context.Context, h lockHold) error { return h.(*rwmutex.Lock).Unlock(ctx) },
		close:   rw.Close,
	}, func(ctx context.Context) ([]kindContender, []kindContender, error) { return readRW(ctx, rw) }, nil
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

// kindEnv is the command's environment: that of a plain lock, and for a
// semaphore or a read lock the kind (and limit), so the command can tell
// which guard its token needs.
func kindEnv(k *locker, l lockHold, tok fencing.Token) []string {
	env := []string{
		"BATON_LOCK_NAME=" + k.name,
		"BATON_LOCK_KEY=" + l.Key(),
		"BATON_FENCING_TOKEN=" + tok.String(),
	}
	env = append(env, setEnv(k, l)...)
	switch k.kind {
	case keys.Semaphore:
		return append(env, "BATON_LOCK_KIND=semaphore", "BATON_SEMAPHORE_LIMIT="+strconv.Itoa(k.limit))
	case keys.RWLock:
		return append(env, "BATON_LOCK_KIND=rwlock-read")
	}
	return env
}

func kindUnit(k *locker) string {
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
		ids = append(ids, cmdutil.Safe(cmdutil.Dash(h.Identity)))
	}
	s := strings.Join(ids, ", ")
	if limit > 0 {
		return fmt.Sprintf("%d of %d permits held by %s", len(hs), limit, s)
	}
	return "held by " + s
}

// kindQueue reads the oldest holder and the waiters ahead of this
// process, found by its identity as the libraries write it.
func kindQueue(read contendersReader) func(ctx context.Context) (queueState, bool, error) {
	self := keyspace.HolderIdentity()
	return func(ctx context.Context) (queueState, bool, error) {
		hs, ws, err := read(ctx)
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
func heldWhat(v HeldView) string {
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

// primitive is the baton.lock.primitive of what k takes.
func (k *locker) primitive() string {
	switch k.kind {
	case keys.Semaphore:
		return telemetry.Semaphore
	case keys.RWLock:
		return telemetry.RWMutex
	}
	return telemetry.Mutex
}
