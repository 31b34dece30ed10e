package serve

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// handle is the library's acquisition behind a hold: a mutex's or a set's
// Lock, a semaphore's Permit, a read/write lock's Lock.
type handle interface {
	Token() fencing.Token
	Key() string
	Lease() clientv3.LeaseID
	TTL() time.Duration
	Acquired() time.Time
	Deadline() time.Time
	Context() context.Context
	Done() <-chan struct{}
	Txn(context.Context) clientv3.Txn
	IsOwner() clientv3.Cmp
}

// acquired is a hold's acquisition, whatever its kind.
type acquired struct {
	handle
	kind     keys.Kind // of its keys, for its acquisition record
	keys     []string
	compares []clientv3.Cmp
	release  func(context.Context) error
	// reqKeys are where an operator's release requests to it are put
	// (mutexes, sets and terms); nil for the kinds that take none.
	reqKeys []string
	// ends closes when a term is asked to hand over; transfer hands it
	// over and returns the successor's token. Both nil for a lock.
	ends     <-chan struct{}
	transfer func(ctx context.Context, to string) (token int64, err error)
}

func fromMutex(l *mutex.Lock) *acquired {
	return &acquired{handle: l, kind: keys.Lock, keys: l.Keys(), compares: l.Compares(), release: l.Unlock, reqKeys: requestKeys(l.Keys(), l.Token())}
}

// requestKeys are the release-request keys of a holder of ks with token.
func requestKeys(ks []string, token fencing.Token) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = request.KeyOf(k, int64(token))
	}
	return out
}

func fromPermit(p *semaphore.Permit) *acquired {
	return &acquired{handle: p, kind: keys.Semaphore, keys: []string{p.Key()}, compares: []clientv3.Cmp{p.IsOwner()}, release: p.Release}
}

func fromRWLock(l *rwmutex.Lock) *acquired {
	return &acquired{handle: l, kind: keys.RWLock, keys: []string{l.Key()}, compares: []clientv3.Cmp{l.IsOwner()}, release: l.Unlock}
}

// acquirer is one primitive, made for one hold and closed after it.
type acquirer struct {
	acquire func(ctx context.Context, try bool) (*acquired, error)
	close   func() error
}

// newAcquirer makes the primitive a hold asks for.
func newAcquirer(cli *clientv3.Client, sp holdSpec, opts []mutex.Option) (acquirer, error) {
	switch sp.kind {
	case batonv1.LockKind_LOCK_KIND_SEMAPHORE:
		s, err := semaphore.New(cli, sp.names[0], sp.limit, opts...)
		if err != nil {
			return acquirer{}, err
		}
		return acquirer{close: s.Close, acquire: func(ctx context.Context, try bool) (*acquired, error) {
			p, err := pick(try, s.TryAcquire, s.Acquire)(ctx)
			if err != nil {
				return nil, err
			}
			return fromPermit(p), nil
		}}, nil
	case batonv1.LockKind_LOCK_KIND_READ, batonv1.LockKind_LOCK_KIND_WRITE:
		rw, err := rwmutex.New(cli, sp.names[0], opts...)
		if err != nil {
			return acquirer{}, err
		}
		lock, try := rw.Lock, rw.TryLock
		if sp.kind == batonv1.LockKind_LOCK_KIND_READ {
			lock, try = rw.RLock, rw.TryRLock
		}
		return acquirer{close: rw.Close, acquire: func(ctx context.Context, t bool) (*acquired, error) {
			l, err := pick(t, try, lock)(ctx)
			if err != nil {
				return nil, err
			}
			return fromRWLock(l), nil
		}}, nil
	}
	var m interface {
		Lock(context.Context) (*mutex.Lock, error)
		TryLock(context.Context) (*mutex.Lock, error)
		Close() error
	}
	var err error
	if len(sp.names) == 1 {
		m, err = mutex.New(cli, sp.names[0], opts...)
	} else {
		m, err = mutex.NewSet(cli, sp.names, opts...)
	}
	if err != nil {
		return acquirer{}, err
	}
	return acquirer{close: m.Close, acquire: func(ctx context.Context, try bool) (*acquired, error) {
		l, err := pick(try, m.TryLock, m.Lock)(ctx)
		if err != nil {
			return nil, err
		}
		return fromMutex(l), nil
	}}, nil
}

func pick[T any](try bool, tryFn, waitFn func(context.Context) (T, error)) func(context.Context) (T, error) {
	if try {
		return tryFn
	}
	return waitFn
}

// busy reports a try that found the lock taken, of any kind.
func busy(err error) bool {
	return errors.Is(err, mutex.ErrLocked) || errors.Is(err, semaphore.ErrNoPermit) || errors.Is(err, rwmutex.ErrLocked)
}
