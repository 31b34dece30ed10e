// Package queue is the waiting line that mutex and election share: every
// contender puts a key under the common prefix, the oldest key (lowest
// CreateRevision) owns, and each waiter watches only the key just before
// its own, so a release wakes exactly one waiter.
//
// A waiter's watch starts at the current revision, not at the one it read:
// etcd serves a watch whose start revision is already past from its
// "unsynced" set, which it catches up only every 100 ms, and under
// contention the revision has usually moved on between the read and the
// watch. When it has, one read of the predecessor covers the gap, so a
// waiter hears of its predecessor's deletion within a round trip.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/internal/retry"
)

// ErrBusy is returned by a Try acquisition when another contender owns.
var ErrBusy = errors.New("held by another contender")

// cleanupWait is how long an acquisition that failed waits for its key's
// deletion before returning; the deletion goes on in the background after
// that, so a caller whose ctx ended is never held up by an unreachable etcd.
const cleanupWait = 80 * time.Millisecond

// Request describes one acquisition.
type Request struct {
	Session *lease.Session
	Prefix  string
	Value   string
	// Try gives up with ErrBusy instead of waiting.
	Try bool
	// Background tracks cleanups that outlive the call; the owner waits for
	// it on Close.
	Background *sync.WaitGroup
	// Closing aborts background cleanups of a borrowed session.
	Closing <-chan struct{}
	// Stop ends a wait with errs.ErrClosed (the owner's Close).
	Stop context.Context
	// MaxHeld caps the keys of the session in use in this process; 0 means
	// no cap.
	MaxHeld int
}

// Result is a successful acquisition.
type Result struct {
	Key string
	// Rev is the key's CreateRevision: the fencing token.
	Rev int64
	// Header is the revision at which ownership was confirmed.
	Header int64
	// Release frees the key's local reservation once the key is gone.
	Release func()
}

// Acquire queues under req.Prefix and returns once the caller owns, ctx
// ends, or the session is lost. On any error it leaves no key behind: the
// key is deleted before return, or in the background if etcd does not
// answer within cleanupWait.
func Acquire(ctx context.Context, req Request) (Result, error) {
	s := req.Session
	cli := s.Client()
	key := keys.LeaseKey(req.Prefix, int64(s.ID()))

	release, err := s.Reserve(ctx, key, req.Try, req.MaxHeld)
	if errors.Is(err, lease.ErrReserved) {
		return Result{}, ErrBusy
	}
	if err != nil {
		return Result{}, err
	}

	// Put our key unless it exists. A key on our own lease that exists
	// already is ours: an earlier attempt of this call whose reply was lost
	// (the key is reserved in this process, so no one else here made it),
	// or one left on this lease by a previous run, as etcd's concurrency
	// package also reuses it. Retrying is therefore safe.
	var resp *clientv3.TxnResponse
	err = retry.Do(ctx, func(actx context.Context) (err error) {
		if err := ended(s, req.Stop); err != nil {
			return err // not worth retrying: nobody waits for this key any more
		}
		resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, req.Value, clientv3.WithLease(s.ID())),
				clientv3.OpGet(req.Prefix, clientv3.WithFirstCreate()...)).
			Else(clientv3.OpGet(key), clientv3.OpGet(req.Prefix, clientv3.WithFirstCreate()...)).
			Commit()
		return err
	})
	if err != nil {
		// The put may have been applied without our hearing of it.
		cleanup(req, key, 0, release)
		return Result{}, failure(ctx, err)
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs
		if len(kv) == 0 { // cannot be: the Else branch ran because it exists
			release()
			return Result{}, fmt.Errorf("queue: key %s neither created nor found", key)
		}
		rev = kv[0].CreateRevision
	}
	owner := resp.Responses[1].GetResponseRange().Kvs
	if len(owner) > 0 && owner[0].CreateRevision == rev {
		return Result{Key: key, Rev: rev, Header: resp.Header.Revision, Release: release}, nil
	}
	if req.Try {
		cleanup(req, key, rev, release)
		return Result{}, ErrBusy
	}

	// Waiting: from here on, a lost session or the owner's Close ends the
	// wait. (Linking only now keeps the uncontended path free of it.)
	ctx, unlink := link(ctx, s, req.Stop)
	defer unlink()
	before := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))
	for {
		resp, err := cli.Txn(ctx).Then(clientv3.OpGet(req.Prefix, before...), clientv3.OpGet(key)).Commit()
		if err != nil {
			// Only reads: safe to retry while the caller still waits and the
			// session lives (a member restarting, a leader election).
			if ctx.Err() == nil && !retry.Permanent(err) && pause(ctx, 100*time.Millisecond) == nil {
				continue
			}
			cleanup(req, key, rev, release)
			return Result{}, failure(ctx, err)
		}
		own := resp.Responses[1].GetResponseRange().Kvs
		if len(own) == 0 || own[0].CreateRevision != rev {
			release()
			return Result{}, LostReason(ctx, s)
		}
		pred := resp.Responses[0].GetResponseRange().Kvs
		if len(pred) == 0 {
			return Result{Key: key, Rev: rev, Header: resp.Header.Revision, Release: release}, nil
		}
		if err := waitGone(ctx, cli, pred[0].Key, pred[0].CreateRevision, resp.Header.Revision); err != nil {
			cleanup(req, key, rev, release)
			return Result{}, failure(ctx, err)
		}
	}
}

// link returns a ctx that also ends when the session is lost (with the
// loss as its cause) or stop ends (with errs.ErrClosed).
func link(ctx context.Context, s *lease.Session, stop context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	unSession := context.AfterFunc(s.Context(), func() { cancel(context.Cause(s.Context())) })
	unStop := func() bool { return false }
	if stop != nil {
		unStop = context.AfterFunc(stop, func() { cancel(errs.ErrClosed) })
	}
	return ctx, func() {
		unSession()
		unStop()
		cancel(nil)
	}
}

// ended says why nobody waits for an acquisition any more, or nil.
func ended(s *lease.Session, stop context.Context) error {
	if s.Lost() {
		return context.Cause(s.Context())
	}
	if stop != nil && stop.Err() != nil {
		return errs.ErrClosed
	}
	return nil
}

// failure prefers why ctx ended (the caller's cancel, or the session's
// loss) over the RPC error it caused.
func failure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// LostReason says why a key of session s is gone: its lease is gone
// (expired or revoked) or only the key was deleted.
func LostReason(ctx context.Context, s *lease.Session) error {
	if s.Lost() {
		return context.Cause(s.Context())
	}
	if s.LeaseGone(context.WithoutCancel(ctx)) {
		s.Lose(errs.ErrLeaseExpired)
		return errs.Lost(errs.ErrLeaseExpired)
	}
	return errs.Lost(errs.ErrKeyDeleted)
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// cleanup deletes key (guarded by rev when known) and then frees its
// reservation. It waits up to cleanupWait and leaves the rest to a
// background goroutine that retries until the key is gone, the session is
// lost (its keys go with the lease), or the owner closes.
func cleanup(req Request, key string, rev int64, release func()) {
	done := make(chan struct{})
	req.Background.Add(1)
	go func() {
		defer req.Background.Done()
		defer close(done)
		defer release()
		s := req.Session
		for attempt := 0; ; attempt++ {
			if deleteKey(s.Client(), key, rev) == nil {
				return
			}
			select {
			case <-s.Context().Done():
				return
			case <-req.Closing:
				if attempt > 0 {
					return
				}
			case <-time.After(retry.Backoff(attempt)):
			}
		}
	}()
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

const deleteTimeout = 2 * time.Second

// deleteKey deletes key if its CreateRevision is rev; rev 0 deletes it
// whatever its revision (safe because the key is named after our own lease
// and reserved in this process).
func deleteKey(cli *clientv3.Client, key string, rev int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	if rev == 0 {
		_, err := cli.Delete(ctx, key)
		return err
	}
	_, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// waitGone returns nil once key, seen with CreateRevision rev at revision
// read, is deleted or replaced, or when the watch ends for a reason worth
// re-reading the queue for; it returns an error only when ctx ends.
//
// The watch starts at the current revision (no WithRev), which etcd always
// serves from its synced set: a watch whose start revision is not in the
// future waits in the unsynced set for up to 100 ms, and under contention
// the revision has usually moved on between the read and the watch. When
// it has (the watch's creation revision is past read), one read of the key
// covers the gap.
func waitGone(ctx context.Context, cli *clientv3.Client, key []byte, rev, read int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, string(key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	created := false
	for wr := range wch {
		if wr.Err() != nil {
			break
		}
		if wr.Created && !created {
			created = true
			if wr.Header.Revision > read {
				g, err := cli.Get(ctx, string(key), clientv3.WithKeysOnly())
				if err != nil {
					break
				}
				if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != rev {
					return nil
				}
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return pause(ctx, 50*time.Millisecond)
}
