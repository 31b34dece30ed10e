package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// rangeClient counts the reads it sends: Range requests, and transactions
// that only read (no put, no delete).
// rangeClient counts the reads through it in n and, when seen is set,
// records each answered read's revision there.
func rangeClient(t *testing.T, n *atomic.Int64, seen func(rev int64)) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				read := method == "/etcdserverpb.KV/Range" || method == "/etcdserverpb.KV/Txn" && readOnly(req)
				if read {
					n.Add(1)
				}
				err := invoker(ctx, method, req, reply, cc, opts...)
				if r, ok := reply.(interface {
					GetHeader() *etcdserverpb.ResponseHeader
				}); read && seen != nil && err == nil && ok {
					seen(r.GetHeader().GetRevision())
				}
				return err
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// readOnly says whether req is a transaction of reads only.
func readOnly(req any) bool {
	t, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// followingSession is a session on cli whose watch stream is up: it holds
// another lock of the namespace when it returns, and released a third, so
// that the namespace has a release mark to delete (its first release ever
// has none).
func followingSession(t *testing.T, ctx context.Context, cli *clientv3.Client, hooks *core.Hooks) *bsession.Session {
	t.Helper()
	live := make(chan struct{}, 1)
	hooks.Stream.Established = func() {
		select {
		case live <- struct{}{}:
		default:
		}
	}
	sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second), config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	name := fmt.Sprintf("following-%d", time.Now().UnixNano())
	other, err := newMutex(t, cli, name, mutex.WithSession(sess)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Unlock(context.Background()) })
	select {
	case <-live:
	case <-ctx.Done():
		t.Fatal("the session's watch stream never came up")
	}
	warm, err := newMutex(t, cli, name+"-released", mutex.WithSession(sess)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	contendedUnlock(t, ctx, cli, warm)
	return sess
}

// contendedUnlock unlocks l with a key queued behind it (on no lease,
// deleted after), so that its release marks: an uncontended release
// writes no mark (TestUncontendedReleaseIsOneDeletion).
func contendedUnlock(t *testing.T, ctx context.Context, cli *clientv3.Client, l *mutex.Lock) {
	t.Helper()
	behind := l.Key()[:strings.LastIndex(l.Key(), "/")+1] + "behind"
	if _, err := cli.Put(ctx, behind, ""); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, behind); err != nil {
		t.Fatal(err)
	}
}

// releaseEvents are the events of the revision that deleted l's key,
// read from a watch of l's namespace from l's acquisition on.
func releaseEvents(t *testing.T, ctx context.Context, cli *clientv3.Client, l *mutex.Lock) []*clientv3.Event {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rev := int64(0)
	var out []*clientv3.Event
	for wr := range cli.Watch(wctx, keys.NamespaceOf(l.Key()), clientv3.WithPrefix(), clientv3.WithRev(int64(l.Token()))) {
		for _, ev := range wr.Events {
			if rev == 0 && ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == l.Key() {
				rev = ev.Kv.ModRevision
			}
			if rev != 0 && ev.Kv.ModRevision == rev {
				out = append(out, ev)
			}
			if rev != 0 && ev.Kv.ModRevision > rev {
				return out
			}
		}
		if rev != 0 && wr.Header.Revision >= rev {
			return out // a watch delivers a revision's events in one response
		}
	}
	t.Fatalf("no deletion of %s seen: %v", l.Key(), ctx.Err())
	return nil
}

// An uncontended release is one deletion, as raw etcd's Unlock: no mark
// is written when no key came after the holder's (the transaction decides,
// so a waiter that enqueued meanwhile is never missed). With a key behind
// it, the release marks.
func TestUncontendedReleaseIsOneDeletion(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	m := newMutex(t, cli, "uncontended-release", mutex.WithTTL(5*time.Second))
	for _, contended := range []bool{false, true, false} {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if contended {
			contendedUnlock(t, ctx, cli, l)
		} else if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		evs := releaseEvents(t, ctx, cli, l)
		marked := false
		for _, ev := range evs {
			marked = marked || keys.IsReleased(string(ev.Kv.Key))
		}
		if contended != marked || !contended && len(evs) != 1 {
			t.Errorf("contended %v: the release's revision wrote %d events (marked %v), want %s", contended, len(evs), marked,
				map[bool]string{false: "the key's deletion alone", true: "a mark"}[contended])
		}
	}
}

// A waiter racing an uncontended holder's Unlock holds either way: when
// its key came first the release marks (and it holds without reading the
// queue again); when the release came first it finds no key ahead. Each
// round's order is read from etcd's revisions.
func TestUncontendedReleaseRacingAnEnqueue(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	admin := client(t)
	wcli := client(t)
	sess := followingSession(t, ctx, wcli, &core.Hooks{})
	a := newMutex(t, client(t), "release-race", mutex.WithTTL(5*time.Second))
	b := newMutex(t, wcli, "release-race", mutex.WithSession(sess))
	orders := map[bool]int{}
	for round := 0; round < 40 && (round < 10 || len(orders) < 2); round++ {
		la, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var lb *mutex.Lock
		start := make(chan struct{})
		go func() { <-start; var err error; lb, err = b.Lock(ctx); got <- err }()
		close(start)
		if round%2 == 1 {
			time.Sleep(time.Duration(round%5) * 200 * time.Microsecond) // vary who goes first; either order is judged
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: the racing waiter: %v", round, err)
		}
		evs := releaseEvents(t, ctx, admin, la)
		marked := false
		for _, ev := range evs {
			marked = marked || keys.IsReleased(string(ev.Kv.Key))
		}
		queuedFirst := int64(lb.Token()) < evs[0].Kv.ModRevision
		if queuedFirst != marked {
			t.Errorf("round %d: the waiter's key at %d, the release at %d, marked %v: want a mark exactly when the key came first",
				round, lb.Token(), evs[0].Kv.ModRevision, marked)
		}
		orders[queuedFirst]++
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("waiter first %d, release first %d", orders[true], orders[false])
}

// lockWhenWaiting calls m.Lock in a goroutine and returns once it waits
// (waiting is signalled by the session's BeforeWait hook); the call's error
// comes on got, and its Lock is in *l once got has.
func lockWhenWaiting(t *testing.T, ctx context.Context, m *mutex.Mutex, waiting <-chan struct{}) (got chan error, l **mutex.Lock) {
	t.Helper()
	got, l = make(chan error, 1), new(*mutex.Lock)
	go func() { var err error; *l, err = m.Lock(ctx); got <- err }()
	select {
	case <-waiting:
	case err := <-got:
		t.Fatalf("Lock returned before it waited: %v", err)
	}
	return got, l
}

// A waiter takes over from an Unlock, or an admin's delete, with one read
// after the deletion of the key ahead: its own key, and whether that
// revision put a release mark (queue.AfterDeletion). The read is the old
// holder's head start after a delete (TestHolderKnowsBeforeTheNextWaiterAcquires);
// the session's watch stream tells the waiter of the key ahead alone, so
// the mark, a key of the namespace, is read, not watched
// (TestAHandoffCostsTheSameEventsHoweverManySessionsHold).
func TestAWaiterReadsOnceAfterTheKeyAheadWent(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	admin := client(t)
	var reads atomic.Int64
	var mu sync.Mutex
	var revs []int64 // each read's revision, in the order answered
	wcli := rangeClient(t, &reads, func(rev int64) { mu.Lock(); revs = append(revs, rev); mu.Unlock() })
	waiting := make(chan int64, 1) // the reads so far, as the waiter starts its wait
	sess := followingSession(t, ctx, wcli, &core.Hooks{BeforeWait: func(string) { waiting <- reads.Load() }})
	for _, how := range []string{"unlock", "admin delete"} {
		a := newMutex(t, client(t), "release-mark", mutex.WithTTL(5*time.Second))
		b := newMutex(t, wcli, "release-mark", mutex.WithSession(sess))
		la, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var lb *mutex.Lock
		go func() { var err error; lb, err = b.Lock(ctx); got <- err }()
		var before int64 // from here the waiter watches: its reads are counted
		select {
		case before = <-waiting:
		case err := <-got:
			t.Fatalf("%s: Lock returned before it waited: %v", how, err)
		}
		mu.Lock()
		from := len(revs)
		mu.Unlock()
		var delRev int64
		if how == "unlock" {
			err = la.Unlock(ctx)
		} else {
			var resp *clientv3.DeleteResponse
			resp, err = admin.Delete(ctx, la.Key())
			if err == nil {
				delRev = resp.Header.Revision
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if how == "unlock" {
			delRev = releaseEvents(t, ctx, admin, la)[0].Kv.ModRevision
		}
		n := reads.Load() - before
		// Reads that saw the deletion: a serializable read that etcd served
		// from before it (its watch notifies before the write's revision
		// is the store's) is answered again linearizably, one read. A read
		// of the gap before the waiter's watch began, if the revision
		// moved meanwhile, comes before it.
		mu.Lock()
		saw := 0
		for _, r := range revs[from:] {
			if r >= delRev {
				saw++
			}
		}
		mu.Unlock()
		if saw != 1 || n > 2 {
			t.Errorf("after the %s the waiter read %d times (%d of them at or after revision %d) before it held, want 1 that saw it", how, n, saw, delRev)
		}
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		_ = b.Close()
	}
}

// A release's marks are two keys of the namespace without a lease: each
// release with a key behind it deletes the one that exists and puts the other, in its own
// revision (the deletion is what a watch of deletions sees), and nothing
// of it stays on a caller's etcd session, whose lease outlives the Mutex.
func TestReleaseMarkLeavesNothingOnTheLease(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	cs := session(t, cli, 10)
	m := newMutex(t, cli, "release-mark-borrowed", mutex.WithSession(cs))
	var last string
	for round := range 3 {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		contendedUnlock(t, ctx, cli, l)
		var put []string
		for _, mark := range []string{keys.ReleasedKey(l.Key()), keys.ReleasedAltKey(l.Key())} {
			r, err := cli.Get(ctx, mark)
			if err != nil {
				t.Fatal(err)
			}
			if r.Count == 1 {
				if r.Kvs[0].Lease != 0 || r.Kvs[0].ModRevision <= int64(l.Token()) {
					t.Fatalf("round %d: %s is %v, want put by the release, on no lease", round, mark, r.Kvs[0])
				}
				put = append(put, mark)
			}
		}
		if len(put) != 1 || put[0] == last {
			t.Fatalf("round %d: marks present %q (the last release's %q), want the other one alone", round, put, last)
		}
		last = put[0]
	}
	ttl, err := cli.TimeToLive(ctx, cs.Lease(), clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 0 {
		t.Fatalf("the caller's lease carries %q (%v) after the release", ttl.Keys, err)
	}
}

// A waiter whose own key goes in the revision that deleted the key ahead
// of it and the namespace's mark (one operator's transaction, or a range
// delete) does not take that for a release: it reads, finds its key gone
// and fails, where it used to return a hold already lost.
func TestWaiterDeletedWithTheKeyAheadAndTheMarkDoesNotHold(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	admin := client(t)
	wcli := client(t)
	waiting := make(chan struct{}, 1)
	sess := followingSession(t, ctx, wcli, &core.Hooks{BeforeWait: func(string) { waiting <- struct{}{} }})
	a := newMutex(t, client(t), "own-key-with-mark", mutex.WithTTL(5*time.Second))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := newMutex(t, wcli, "own-key-with-mark", mutex.WithSession(sess))
	got, lb := lockWhenWaiting(t, ctx, b, waiting)
	name := la.Key()[:strings.LastIndex(la.Key(), "/")+1]
	r, err := admin.Get(ctx, name, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(r.Kvs) != 2 {
		t.Fatalf("the queue: %v, %v; want the holder's key and the waiter's", r, err)
	}
	own := string(r.Kvs[0].Key)
	if own == la.Key() {
		own = string(r.Kvs[1].Key)
	}
	ops := []clientv3.Op{clientv3.OpDelete(la.Key()), clientv3.OpDelete(own)} // the key ahead first
	for _, mark := range []string{keys.ReleasedKey(own), keys.ReleasedAltKey(own)} {
		ops = append(ops, clientv3.OpDelete(mark))
	}
	if _, err := admin.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err == nil {
			cause := context.Cause((*lb).Context())
			_ = (*lb).Unlock(ctx)
			t.Fatalf("Lock returned a hold though its key was deleted with the one ahead (its Context: %v)", cause)
		}
	case <-ctx.Done():
		t.Fatal("Lock did not return after its key was deleted")
	}
	_ = a.Close()
	_ = b.Close()
}

// A waiter that read the queue again waits for the key just ahead alone; a
// revision that deletes that key and the namespace's mark without being a
// release (an operator's range delete, a revoke of a lease a mark was put
// on) must not make it hold while an older key still holds: it reads the
// release (a mark put at that revision) before it takes it for one.
func TestWaiterAfterARereadDoesNotTakeAFakeReleaseForOne(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	admin := client(t)
	wcli := client(t)
	waiting := make(chan struct{}, 1)
	reread := make(chan struct{}, 64)
	sess := followingSession(t, ctx, wcli, &core.Hooks{
		BeforeWait: func(string) { waiting <- struct{}{} },
		ReadAhead: func(string) {
			select {
			case reread <- struct{}{}:
			default: // never blocks the waiter
			}
		},
	})
	a := newMutex(t, client(t), "fake-release", mutex.WithTTL(5*time.Second))
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// Waiters' keys behind the holder, on a lease of the admin's: X, then
	// more than queue.MaxRead, so that the waiter's first read is partial.
	name := la.Key()[:strings.LastIndex(la.Key(), "/")+1]
	g, err := admin.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Revoke(context.Background(), g.ID) })
	x := name + "x"
	if _, err := admin.Put(ctx, x, "", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	var ys []clientv3.Op
	for i := range queue.MaxRead {
		y := fmt.Sprintf("%sy%02d", name, i)
		if _, err := admin.Put(ctx, y, "", clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		ys = append(ys, clientv3.OpDelete(y))
	}
	b := newMutex(t, wcli, "fake-release", mutex.WithSession(sess))
	got, lb := lockWhenWaiting(t, ctx, b, waiting)
	step := func(what string) {
		t.Helper()
		select {
		case <-reread:
		case err := <-got:
			t.Fatalf("%s: Lock returned (%v) while %s holds", what, err, la.Key())
		case <-ctx.Done():
			t.Fatalf("%s: the waiter did not read the queue again", what)
		}
	}
	// The waiters it knew go (not a release): it reads again, and waits
	// for X alone.
	if _, err := admin.Txn(ctx).Then(ys...).Commit(); err != nil {
		t.Fatal(err)
	}
	step("after the partial read's keys went")
	// X and the mark in one revision: a release to a watch of X,
	// but no mark was put. The waiter reads again and waits for the holder.
	ops := []clientv3.Op{clientv3.OpDelete(x)}
	for _, mark := range []string{keys.ReleasedKey(x), keys.ReleasedAltKey(x)} {
		ops = append(ops, clientv3.OpDelete(mark))
	}
	if _, err := admin.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	step("after X and the mark went in one revision")
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter did not hold after the holder's Unlock")
	}
	if err := (*lb).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
}

// After its session's Close revoked the lease, a Mutex's Close and a
// Lock's Unlock send nothing: the revoke deleted every key on the lease
// (100,000 Mutexes closed after their session took 27 s of guarded
// deletes that could not apply).
func TestCloseAfterTheSessionsRevokeSendsNothing(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	var sent atomic.Int64
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if strings.HasPrefix(method, "/etcdserverpb.KV/") {
					sent.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	var ms []*mutex.Mutex
	var ls []*mutex.Lock
	for i := range 3 {
		m := newMutex(t, cli, fmt.Sprintf("closed-session-%d", i), mutex.WithSession(sess))
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, ls = append(ms, m), append(ls, l)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	before := sent.Load()
	if err := ls[0].Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Errorf("Unlock after the session's Close: %v, want ErrNotHeld", err)
	}
	for _, m := range ms {
		if err := m.Close(); err != nil {
			t.Errorf("Close after the session's Close: %v", err)
		}
	}
	if n := sent.Load() - before; n != 0 {
		t.Errorf("%d KV requests sent after the session's revoke, want 0", n)
	}
	for _, l := range ls {
		if r, err := client(t).Get(ctx, l.Key()); err != nil || r.Count != 0 {
			t.Errorf("%s after the session's Close: %v, %v; want gone", l.Key(), r, err)
		}
	}
}
