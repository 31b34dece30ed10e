package hold

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// `baton lock A B C -- CMD` takes the three locks at once through a
// mutex.Set: one transaction puts a key in each lock's queue, so they share
// one fencing token, and the command gets that token with every name and
// key in BATON_LOCK_NAMES and BATON_LOCK_KEYS (one per line: a name holds
// no control character).

// lockNames separates the names from the command: several names need "--"
// (even with no command, as in `baton lock a b --`), so that `baton lock
// NAME CMD` without it stays the usage error it was.
func lockNames(cmd *cobra.Command, a []string) (names, argv []string, err error) {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		argv, err = splitCommand(cmd, a, 1)
		return a[:1], argv, err
	}
	if dash == 0 {
		return nil, nil, cmdutil.UsageErrorf("give at least one NAME before --")
	}
	if dash > mutex.MaxSetNames {
		return nil, nil, cmdutil.UsageErrorf("%d names: at most %d locks are taken at once (one etcd transaction)", dash, mutex.MaxSetNames)
	}
	seen := make(map[string]bool, dash)
	for _, n := range a[:dash] {
		if seen[n] {
			return nil, nil, cmdutil.UsageErrorf("lock %s named twice", cmdutil.SafeQ(n))
		}
		seen[n] = true
	}
	return a[:dash], a[dash:], nil
}

// newSetLocker takes several names at once as one lock.
func newSetLocker(cli *clientv3.Client, g *cmdutil.Env, o lockOptions, names []string, ms *metricsServer) (*locker, error) {
	if o.limit != 0 || o.shared {
		return nil, errors.New("--limit and --shared take one NAME: a semaphore or a read/write lock is not part of a set")
	}
	s, err := mutex.NewSet(cli, names, mutex.WithTTL(o.ttl), mutex.WithNamespace(g.Namespace), mutex.WithRegisterer(ms.registerer()), mutex.WithLockDelay(o.delay), mutex.WithTracerProvider(o.tp))
	if err != nil {
		return nil, err
	}
	// Plain Mutexes of the names, never locked: for the status and errors.
	ms2 := make([]*mutex.Mutex, len(names))
	closeAll := func() error {
		errs := []error{s.Close()}
		for _, m := range ms2 {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
		return errors.Join(errs...)
	}
	for i, n := range names {
		if ms2[i], err = mutex.New(cli, n, mutex.WithNamespace(g.Namespace)); err != nil {
			_ = closeAll()
			return nil, err
		}
	}
	queues := make([]func(context.Context) (queueState, bool, error), len(names))
	for i, m := range ms2 {
		queues[i] = lockQueue(cli, m)
	}
	return &locker{
		kind: keys.Lock, name: strings.Join(names, ", "), names: names, ns: g.Namespace, prefix: ms2[0].Prefix(),
		notHeld: mutex.ErrNotHeld, busy: mutex.ErrLocked,
		acquire: mutexAcquire(s.Lock, s.TryLock), release: unlockMutex,
		busyError: func(ctx context.Context) error {
			var held []string
			for _, m := range ms2 {
				if h, herr := m.Holder(ctx); herr == nil && h.Key != "" {
					held = append(held, fmt.Sprintf("%s (holder %s, token %d)", cmdutil.SafeQ(m.Name()), cmdutil.SafeQ(h.Identity), h.Token))
				}
			}
			return fmt.Errorf("locks %s: held by another: %s", cmdutil.SafeQ(strings.Join(names, ", ")), strings.Join(held, ", "))
		},
		// The status names the first member another holds.
		queue: func(ctx context.Context) (queueState, bool, error) {
			for _, q := range queues {
				if st, ok, err := q(ctx); err != nil || ok {
					return st, ok, err
				}
			}
			return queueState{}, false, nil
		},
		close: closeAll,
	}, nil
}

// setEnv is what a set's command gets beside the first name and key.
func setEnv(k *locker, l lockHold) []string {
	ml, ok := l.(*mutex.Lock)
	if len(k.names) < 2 || !ok {
		return nil
	}
	return []string{"BATON_LOCK_NAMES=" + strings.Join(k.names, "\n"), "BATON_LOCK_KEYS=" + strings.Join(ml.Keys(), "\n")}
}

// heldPuts records the acquisition of every name the hold covers.
func heldPuts(k *locker, l lockHold) []clientv3.Op {
	names := k.names
	if len(names) == 0 {
		names = []string{k.name}
	}
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		ops[i] = keyspace.HeldPut(k.ns, k.kind, n, l.Lease(), l.Acquired())
	}
	return ops
}
