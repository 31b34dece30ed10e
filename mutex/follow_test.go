package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// followSetup is a waiter whose session already holds a lock in the
// namespace (so its namespace watch runs), queued behind a holder on
// another client. hooks are the waiter's session's.
type followSetup struct {
	cli     *clientv3.Client
	hooks   *core.Hooks
	sess    *bsession.Session
	holder  *mutex.Lock
	waiter  *mutex.Mutex
	deleted chan string // every deletion the waiter's namespace watch delivers
}

func newFollowSetup(t *testing.T, ctx context.Context, name string) *followSetup {
	t.Helper()
	f := &followSetup{cli: client(t), deleted: make(chan string, 1024)}
	f.hooks = &core.Hooks{Deleted: func(key string) {
		select {
		case f.deleted <- key:
		default:
		}
	}}
	sess, err := bsession.New(f.cli, config.Hooks(f.hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	f.sess = sess
	other := newMutex(t, f.cli, name+"-other", mutex.WithSession(sess))
	held, err := other.Lock(ctx) // the namespace watch starts with this hold
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Unlock(context.Background()) })
	h := newMutex(t, client(t), name)
	if f.holder, err = h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	f.waiter = newMutex(t, f.cli, name, mutex.WithSession(sess))
	return f
}

// sawDeletion waits until the waiter's namespace watch delivered key's
// deletion.
func (f *followSetup) sawDeletion(t *testing.T, key string) {
	t.Helper()
	for {
		select {
		case k := <-f.deleted:
			if k == key {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the namespace watch never delivered the deletion of %s", key)
		}
	}
}

// noise puts and deletes key, then waits until the waiter's namespace
// watch delivered the deletion.
func (f *followSetup) noise(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	if _, err := f.cli.Put(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	f.sawDeletion(t, key)
}

// releaseBeforeWait makes the holder unlock once the waiter's enqueue read
// it, before the waiter waits, and waits until the waiter's namespace watch
// delivered that deletion; then more runs.
func (f *followSetup) releaseBeforeWait(t *testing.T, ctx context.Context, more func()) {
	f.hooks.BeforeWait = func(string) {
		if err := f.holder.Unlock(ctx); err != nil {
			t.Error(err)
		}
		f.sawDeletion(t, f.holder.Key())
		more()
	}
}

// lockWithin locks the waiter within 5 s, then unlocks.
func (f *followSetup) lockWithin(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := f.waiter.Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after %s: %v", what, err)
	}
	_ = l.Unlock(ctx)
}

// watchers is the number of watchers the member serves.
func watchers(t *testing.T) float64 {
	t.Helper()
	return srv.Metric(t, "etcd_debugging_mvcc_watcher_total")
}

// A waiter whose session's namespace watch runs follows it: no watch of its
// own while it waits, and it acquires when the holder goes.
func TestWaiterFollowsItsSessionsWatch(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	f := newFollowSetup(t, ctx, "follow-shared")
	waitsWithoutAWatchOfItsOwn(t, ctx, f.hooks, f.waiter, f.holder, "it watches on its own")
}

// waitsWithoutAWatchOfItsOwn locks w, queued behind holder, and checks that
// etcd has no more watchers while w waits than before; then holder unlocks
// and w must acquire. hooks are w's session's.
func waitsWithoutAWatchOfItsOwn(t *testing.T, ctx context.Context, hooks *core.Hooks, w *mutex.Mutex, holder *mutex.Lock, why string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // the holders' namespace watches are up
	before := watchers(t)
	waiting := make(chan struct{})
	hooks.BeforeWait = func(string) { close(waiting) }
	got := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	<-waiting
	time.Sleep(200 * time.Millisecond) // a watch of its own would be created by now
	if n := watchers(t); n != before {
		t.Errorf("etcd has %v watchers while the waiter waits, %v before: %s", n, before, why)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never acquired after the holder's Unlock")
	}
}

// The holder's key is deleted after the waiter's enqueue read it and before
// the waiter follows the stream, which has delivered the deletion already:
// the waiter must take it from the deletions kept, not wait for another.
func TestFollowerTakesADeletionDeliveredBeforeItFollowed(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	f := newFollowSetup(t, ctx, "follow-before")
	f.releaseBeforeWait(t, ctx, func() {})
	f.lockWithin(t, ctx, "the holder's key went before the wait")
}

// More deletions than the stream keeps come between the enqueue's read and
// the follow, the holder's first: the waiter cannot take the stream's word
// and must watch or read for itself.
func TestFollowerPastTheKeptDeletionsReadsForItself(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	f := newFollowSetup(t, ctx, "follow-past")
	f.releaseBeforeWait(t, ctx, func() {
		for i := range 100 {
			f.noise(t, ctx, fmt.Sprintf("%sv1/lock/follow-noise/%03d", keys.NamespaceOf(f.waiter.Prefix()), i))
		}
	})
	f.lockWithin(t, ctx, "the holder's deletion left the kept deletions")
}

// The waiter's own key is deleted while it follows: Lock returns the loss.
func TestFollowerWhoseKeyIsDeletedLoses(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	f := newFollowSetup(t, ctx, "follow-own")
	own := make(chan string, 1)
	f.hooks.BeforeWait = func(key string) { own <- key }
	got := make(chan error, 1)
	go func() {
		l, err := f.waiter.Lock(ctx)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	key := <-own
	time.Sleep(100 * time.Millisecond) // following
	if _, err := f.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, mutex.ErrLost) {
			t.Fatalf("Lock whose key %s was deleted = %v, want ErrLost", key, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower whose key was deleted never returned")
	}
}

// A namespace watch stopped while idle reports its end after the session's
// next watch is up: that late report must not mark the new stream down,
// else every later waiter of the session watches on its own. Forced: the
// stopped loop is held in its StreamEnded hook until the new stream has
// delivered a deletion.
func TestALateEndOfAStoppedWatchLeavesTheNextOneLive(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	cli := client(t)
	deleted := make(chan string, 64)
	hooks := &core.Hooks{Deleted: func(key string) {
		select {
		case deleted <- key:
		default:
		}
	}}
	sess, err := bsession.New(cli, config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	first, err := newMutex(t, cli, "late-end-a", mutex.WithSession(sess)).Lock(ctx) // the first loop starts
	if err != nil {
		t.Fatal(err)
	}
	noise := keys.NamespaceOf(first.Key()) + "v1/lock/late-end-noise/x"
	up := func() { (&followSetup{cli: cli, deleted: deleted}).noise(t, ctx, noise) } // the session's current stream delivers
	up()
	ended, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks.StreamEnded = func() { once.Do(func() { close(ended); <-release }) }
	if err := first.Unlock(ctx); err != nil { // held once: its watch stops at once
		t.Fatal(err)
	}
	<-ended
	second, err := newMutex(t, cli, "late-end-b", mutex.WithSession(sess)).Lock(ctx) // the next loop starts
	if err != nil {
		t.Fatal(err)
	}
	defer second.Unlock(ctx)
	up() // the first loop is held in its hook: this is the next one's
	close(release)
	time.Sleep(50 * time.Millisecond) // the first loop reports its end

	h, err := newMutex(t, client(t), "late-end-c").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitsWithoutAWatchOfItsOwn(t, ctx, hooks, newMutex(t, cli, "late-end-c", mutex.WithSession(sess)), h, "the session's stream was taken for down")
}

// A namespace watch stopped while idle must not take followers: a waiter
// that follows before the stopped loop reports its end, while a new hold
// starts the next loop, would hear of neither the holder's deletion (the
// stopped stream no longer runs, the next one starts after it) nor the old
// stream's end (a stopped loop's news is ignored), and would wait until its
// context ends although the lock is free. Forced: the stopped loop is held
// in its StreamEnded hook while the waiter follows, the holder unlocks and
// the next loop starts.
func TestAWaiterDoesNotFollowAStoppedWatch(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	established := make(chan struct{}, 8)
	hooks := &core.Hooks{Established: func() {
		select {
		case established <- struct{}{}:
		default:
		}
	}}
	sess, err := bsession.New(cli, config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	first, err := newMutex(t, cli, "stopped-a", mutex.WithSession(sess)).Lock(ctx) // the first loop starts
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, established, 5*time.Second, "the first stream")
	ended, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	hooks.StreamEnded = func() { once.Do(func() { close(ended); <-release }) }
	unhold := func() { released.Do(func() { close(release) }) }
	defer unhold() // a failure below leaves no loop held
	// Held once: its watch stops at once.
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, ended, 5*time.Second, "the stopped stream's end")

	holder, err := newMutex(t, client(t), "stopped-b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan struct{})
	var follows sync.Once
	hooks.Followed = func(bool) { follows.Do(func() { close(followed) }) }
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := newMutex(t, cli, "stopped-b", mutex.WithSession(sess)).Lock(lctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	etcdtest.Within(t, followed, 5*time.Second, "the waiter's wait")
	if err := holder.Unlock(ctx); err != nil { // no stream runs
		t.Fatal(err)
	}
	next, err := newMutex(t, cli, "stopped-c", mutex.WithSession(sess)).Lock(ctx) // the next loop starts
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctx)
	unhold()
	if err := <-got; err != nil {
		t.Fatalf("the waiter on a free lock: %v", err)
	}
}
