package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

func TestNewSetRefusesBadNames(t *testing.T) {
	cli := client(t)
	many := make([]string, mutex.MaxSetNames+1)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	tests := []struct {
		name    string
		names   []string
		opts    []mutex.Option
		wantErr string // empty: accepted
	}{
		{"one name", []string{"a"}, nil, ""},
		{"exactly the limit", many[:mutex.MaxSetNames], nil, ""},
		{"empty", nil, nil, "must not be empty"},
		{"duplicate", []string{"a", "b", "a"}, nil, `name "a" given twice (names[0] and names[2])`},
		{"over the limit", many, nil, "128 names, at most 127"},
		{"the limit with a lock-delay", many[:mutex.MaxSetNamesWithLockDelay], []mutex.Option{mutex.WithLockDelay(2 * time.Second)}, ""},
		{"over the limit with a lock-delay", many[:mutex.MaxSetNamesWithLockDelay+1], []mutex.Option{mutex.WithLockDelay(2 * time.Second)}, "65 names with WithLockDelay, at most 64"},
		{"empty name", []string{"a", ""}, nil, "names[1]"},
		{"control character", []string{"a\x00"}, nil, "control character"},
		{"bad option", []string{"a"}, []mutex.Option{mutex.WithTTL(time.Second)}, "at least 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := mutex.NewSet(cli, tt.names, tt.opts...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("accepted; want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, mutex.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q; want one wrapping ErrInvalid and containing %q", err, tt.wantErr)
			}
		})
	}
}

// A Set of MaxSetNames names (MaxSetNamesWithLockDelay with a lock-delay)
// is within what etcd takes in one transaction by default: it locks, and
// unlocks, leaving no key and no lock-delay record.
func TestSetOfTheMostNamesLocksOnDefaultEtcd(t *testing.T) {
	t.Run("plain", func(t *testing.T) { mostNames(t, "most-", mutex.MaxSetNames) })
	t.Run("lock-delay", func(t *testing.T) {
		mostNames(t, "most-delayed-", mutex.MaxSetNamesWithLockDelay, mutex.WithLockDelay(3*time.Second))
	})
}

func mostNames(t *testing.T, prefix string, n int, opts ...mutex.Option) {
	cli := client(t)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint(prefix, i)
	}
	s := newSet(t, cli, names, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock of a Set of %d names: %v", len(names), err)
	}
	if got := len(l.Keys()); got != len(names) {
		t.Fatalf("the lock has %d keys, want %d", got, len(names))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a Set of %d names: %v", len(names), err)
	}
	for _, p := range []string{"/set/v1/lock/" + prefix, "/set/v1/delay/lock/" + prefix} {
		resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("%d keys left under %s after Unlock", resp.Count, p)
		}
	}
}

func newSet(t *testing.T, cli *clientv3.Client, names []string, opts ...mutex.Option) *mutex.Set {
	t.Helper()
	s, err := mutex.NewSet(cli, names, append([]mutex.Option{mutex.WithTTL(5 * time.Second), mutex.WithNamespace("set")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newPlain(t *testing.T, cli *clientv3.Client, name string, opts ...mutex.Option) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(cli, name, append([]mutex.Option{mutex.WithTTL(5 * time.Second), mutex.WithNamespace("set")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestSetLockOneTokenForEveryKeyAndOneReleaseTransaction: every key of a
// set lock is in its name's queue with the one token as CreateRevision, and
// Unlock deletes them all at one revision.
func TestSetLockOneTokenForEveryKeyAndOneReleaseTransaction(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	s := newSet(t, cli, []string{"one-a", "one-b", "one-c"})
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ks := l.Keys()
	if len(ks) != 3 || ks[0] != l.Key() {
		t.Fatalf("keys %v, key %s", ks, l.Key())
	}
	for i, name := range []string{"one-a", "one-b", "one-c"} {
		if !strings.HasPrefix(ks[i], "/set/v1/lock/"+name+"/") {
			t.Fatalf("key %s is not in the queue of %q", ks[i], name)
		}
		g, err := cli.Get(ctx, ks[i])
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("key %s: %v %v", ks[i], g, err)
		}
		if g.Kvs[0].CreateRevision != int64(l.Token()) {
			t.Fatalf("key %s created at %d, token %d", ks[i], g.Kvs[0].CreateRevision, l.Token())
		}
		h, err := newPlain(t, cli, name).Holder(ctx)
		if err != nil || h.Key != ks[i] {
			t.Fatalf("holder of %q: %+v %v; want %s", name, h, err, ks[i])
		}
	}
	from, _ := cli.Get(ctx, "x")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if c := context.Cause(l.Context()); !errors.Is(c, mutex.ErrReleased) {
		t.Fatalf("cause %v; want ErrReleased", c)
	}
	revs := map[int64]int{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(wctx, "/set/v1/lock/one-", clientv3.WithPrefix(), clientv3.WithRev(from.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				revs[ev.Kv.ModRevision]++
			}
		}
		if len(revs) > 0 {
			break
		}
	}
	if len(revs) != 1 {
		t.Fatalf("deletions at revisions %v; want all three at one", revs)
	}
	for _, n := range revs {
		if n != 3 {
			t.Fatalf("deletions at revisions %v; want all three at one", revs)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}

// TestSetAndMutexOfTheSameNameExcludeEachOther: a plain holder of one
// member makes TryLock fail and Lock wait; a set holder makes a plain
// TryLock fail. Also through one shared session.
func TestSetAndMutexOfTheSameNameExcludeEachOther(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared session ", shared), func(t *testing.T) {
			cli := client(t)
			ctx := etcdtest.Context(t, 20*time.Second)
			var opts []mutex.Option
			if shared {
				sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sess.Close() })
				opts = append(opts, mutex.WithSession(sess))
			}
			a, b := fmt.Sprint("ex-a-", shared), fmt.Sprint("ex-b-", shared)
			plain := newPlain(t, cli, b, opts...)
			s := newSet(t, cli, []string{a, b}, opts...)
			pl, err := plain.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.TryLock(ctx); !errors.Is(err, mutex.ErrLocked) || !strings.Contains(err.Error(), b) {
				t.Fatalf("TryLock with %q held: %v; want ErrLocked naming it", b, err)
			}
			if h, _ := newPlain(t, cli, a).Holder(ctx); h.Key != "" {
				t.Fatalf("TryLock left a key behind in %q: %s", a, h.Key)
			}
			got := make(chan *mutex.Lock, 1)
			go func() {
				l, err := s.Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			select {
			case <-got:
				t.Fatal("the set acquired while a member was held")
			case <-time.After(300 * time.Millisecond):
			}
			if err := pl.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			sl := <-got
			if sl == nil {
				return
			}
			if sl.Token() <= pl.Token() {
				t.Fatalf("set token %d not above the plain holder's %d", sl.Token(), pl.Token())
			}
			if _, err := plain.TryLock(ctx); !errors.Is(err, mutex.ErrLocked) {
				t.Fatalf("plain TryLock while the set holds: %v; want ErrLocked", err)
			}
			if err := sl.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			pl2, err := plain.TryLock(ctx)
			if err != nil {
				t.Fatalf("plain TryLock after the set's Unlock: %v", err)
			}
			_ = pl2.Unlock(ctx)
		})
	}
}

// TestSetLockEndsWhenAnyKeyIsDeleted: deleting one member's key ends the
// one Context; a guarded Txn applies nothing; Unlock says ErrNotHeld and
// still deletes the other keys.
func TestSetLockEndsWhenAnyKeyIsDeleted(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	s := newSet(t, cli, []string{"loss-a", "loss-b", "loss-c"})
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Txn(ctx).Then(clientv3.OpPut("/set/work/loss", "1")).Commit(); err != nil {
		t.Fatalf("guarded write while held: %v", err)
	}
	if _, err := cli.Delete(ctx, l.Keys()[1]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the set lock's Context did not end when one key was deleted")
	}
	if c := context.Cause(l.Context()); !errors.Is(c, mutex.ErrLost) {
		t.Fatalf("cause %v; want ErrLost", c)
	}
	if _, err := l.Txn(ctx).Then(clientv3.OpPut("/set/work/loss", "2")).Commit(); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("guarded write after a loss: %v; want ErrNotHeld", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("Unlock after a loss: %v; want ErrNotHeld", err)
	}
	for _, k := range l.Keys() {
		if g, _ := cli.Get(ctx, k); len(g.Kvs) != 0 {
			t.Fatalf("key %s left after Unlock", k)
		}
	}
	if g, _ := cli.Get(ctx, "/set/work/loss"); string(g.Kvs[0].Value) != "1" {
		t.Fatalf("work key %q; the write after the loss applied", g.Kvs[0].Value)
	}
}

// TestSetTxnRejectedWhenAMemberIsGoneEndsTheContext: the guarded Txn
// itself finds the missing key (before any watch news) and ends the lock.
func TestSetTxnIsGuardedByEveryKey(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	s := newSet(t, cli, []string{"txn-a", "txn-b"})
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	cmps := l.Compares()
	if len(cmps) != 2 {
		t.Fatalf("%d compares", len(cmps))
	}
	r, err := l.Txn(ctx).If(clientv3.Compare(clientv3.Version("/set/work/txn"), "=", 0)).
		Then(clientv3.OpPut("/set/work/txn", "x")).Else(clientv3.OpGet("/set/work/txn")).Commit()
	if err != nil || !r.Succeeded {
		t.Fatalf("first guarded write: %v %v", r, err)
	}
	r, err = l.Txn(ctx).If(clientv3.Compare(clientv3.Version("/set/work/txn"), "=", 0)).
		Then(clientv3.OpPut("/set/work/txn", "y")).Else(clientv3.OpGet("/set/work/txn")).Commit()
	if err != nil || r.Succeeded || len(r.Responses) != 1 {
		t.Fatalf("second guarded write: the caller's Else should run: %v %v", r, err)
	}
}

// TestSetsInOppositeOrdersDoNotDeadlock: two sets of the same names in
// opposite orders, on their own clients, take turns without deadlock.
func TestSetsInOppositeOrdersDoNotDeadlock(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	s1 := newSet(t, client(t), []string{"dl-a", "dl-b"})
	s2 := newSet(t, client(t), []string{"dl-b", "dl-a"})
	done := make(chan int, 2)
	for i, s := range []*mutex.Set{s1, s2} {
		go func() {
			n := 0
			for range 30 {
				l, err := s.Lock(ctx)
				if err != nil {
					t.Error(err)
					break
				}
				n++
				_ = l.Unlock(ctx)
			}
			done <- n + i*0
		}()
	}
	for range 2 {
		if n := <-done; n != 30 {
			t.Fatalf("%d of 30 acquisitions", n)
		}
	}
}

// TestSetCloseReleasesAndRefuses: Close releases what the Set holds and
// ends a waiting Lock with ErrClosed; Lock after Close is ErrClosed.
func TestSetCloseReleasesAndRefuses(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	s, err := mutex.NewSet(cli, []string{"close-a", "close-b"}, mutex.WithNamespace("set"), mutex.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := newSet(t, client(t), []string{"close-b", "close-c"})
	waitErr := make(chan error, 1)
	go func() {
		_, err := s2.Lock(ctx)
		waitErr <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c := context.Cause(l.Context()); !errors.Is(c, mutex.ErrReleased) {
		t.Fatalf("cause after Close: %v", c)
	}
	if err := <-waitErr; err != nil {
		t.Fatalf("the other set did not acquire after Close: %v", err)
	}
	if _, err := s.Lock(ctx); !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	l3 := make(chan error, 1)
	s3 := newSet(t, client(t), []string{"close-c"})
	go func() { _, err := s3.Lock(ctx); l3 <- err }()
	time.Sleep(100 * time.Millisecond)
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-l3; !errors.Is(err, mutex.ErrClosed) {
		t.Fatalf("waiting Lock ended by Close: %v; want ErrClosed", err)
	}
}
