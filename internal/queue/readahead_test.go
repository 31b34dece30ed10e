package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/watch"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

// A waiter's read of the key ahead asks for keys only, so that etcd
// answers it from its in-memory index: a read sorted by CreateRevision
// visits every key of the queue (etcd applies the limit after sorting),
// and with values it also reads and decodes each one from bolt, which
// made every handoff cost O(queue) disk-backed reads (issue 34: 10,000
// waiters drained at 15 ms of CPU per handoff against 1.3 ms at 1,000).
// The answer must still be the newest key older than ours, and our own.
func TestReadAheadReadsKeysOnlyAndFindsTheNewestOlderKey(t *testing.T) {
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/readahead-%d/v1/lock/x/", time.Now().UnixNano())
	value := strings.Repeat("v", 512)
	var revs []int64
	for i := range 5 {
		r, err := cli.Put(ctx, fmt.Sprintf("%s%02x", prefix, 0xf0-i), value) // key order is not creation order
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Header.Revision)
	}
	own := fmt.Sprintf("%s%02x", prefix, 0xf0-4)
	for _, minRev := range []int64{0, revs[4]} {
		resp, err := queue.ReadAhead(ctx, cli, prefix, own, revs[4], nil, minRev)
		if err != nil {
			t.Fatal(err)
		}
		older := resp.Responses[0].GetResponseRange().Kvs
		if len(older) != 1 || older[0].CreateRevision != revs[3] || string(older[0].Key) != fmt.Sprintf("%s%02x", prefix, 0xf0-3) {
			t.Fatalf("minRev %d: read ahead %v, want the key created at %d", minRev, older, revs[3])
		}
		if len(older[0].Value) != 0 {
			t.Errorf("minRev %d: the key ahead came with its %d-byte value: etcd read every key of the queue from bolt", minRev, len(older[0].Value))
		}
		if me := resp.Responses[1].GetResponseRange().Kvs; len(me) != 1 || me[0].CreateRevision != revs[4] {
			t.Errorf("minRev %d: own key read as %v", minRev, me)
		}
	}
	if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// The read after the deletion of the key ahead tells a release by its
// holder (the deletion's revision put the namespace's release mark) from
// any other deletion (a revoke, a force-unlock, a waiter giving up): only
// the first says nothing older is left, with no read of the queue.
func TestAfterDeletionTellsAReleaseFromAPlainDelete(t *testing.T) {
	cli := srv.Client(t)
	for _, release := range []bool{true, false} {
		t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			prefix := fmt.Sprintf("/afterdel-%d/v1/lock/x/", time.Now().UnixNano())
			ahead, own := prefix+"a", prefix+"b"
			if _, err := cli.Put(ctx, ahead, ""); err != nil {
				t.Fatal(err)
			}
			r, err := cli.Put(ctx, own, "")
			if err != nil {
				t.Fatal(err)
			}
			var del *clientv3.TxnResponse
			if release {
				del, err = cli.Txn(ctx).Then(queue.Release(ahead, true, false, 0)...).Commit()
			} else {
				del, err = cli.Txn(ctx).Then(clientv3.OpDelete(ahead)).Commit()
			}
			if err != nil {
				t.Fatal(err)
			}
			released, err := queue.AfterDeletion(ctx, cli, own, r.Header.Revision, del.Header.Revision, true)
			if err != nil {
				t.Fatal(err)
			}
			if released != release {
				t.Errorf("released = %v after a deletion with release mark %v", released, release)
			}
			// A waiter's own key deleted with the key ahead (a hand-over that
			// skips it): not its turn, whatever the mark says.
			del, err = cli.Txn(ctx).Then(append(queue.Release(own, true, false, 0), clientv3.OpPut(prefix+"c", ""))...).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := queue.AfterDeletion(ctx, cli, own, r.Header.Revision, del.Header.Revision, true); !errors.Is(err, queue.ErrOwnKeyGone) {
				t.Errorf("AfterDeletion of a waiter whose key went = %v, want ErrOwnKeyGone", err)
			}
		})
	}
}

// stream is a session's watch stream for a test that waits on its own.
func stream(t *testing.T, cli *clientv3.Client) *watch.Stream[*int] {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	return watch.New(&watch.Config[*int]{Client: cli, Ctx: ctx,
		Go: func(fn func()) bool {
			if ctx.Err() != nil {
				return false
			}
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
			return true
		},
		Key: func(*int) string { return "" }, Rev: func(*int) int64 { return 0 }, Gone: func(*int) {}})
}

// A key ahead deleted between the waiter's read and the start of its
// watch (which etcd serves from the current revision) is found by a read
// of it: the watch alone never tells it, and the waiter would wait for a
// lock already free (planted bug l leaves that read out).
func TestWaitGoneFindsADeletionBeforeItsWatchBegan(t *testing.T) {
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/waitgone-%d/v1/lock/x/", time.Now().UnixNano())
	if _, err := cli.Put(ctx, prefix+"a", ""); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, prefix+"b", "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, prefix+"a")
	if err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, prefix+"a") // after the read, before the wait
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	s := stream(t, cli)
	at, exact, done, err := queue.WaitGone(wctx, cli, s, prefix+"b", s.Expect(prefix+"b"), g.Kvs, 0, r.Header.Revision)
	if err != nil || !done || exact || at < del.Header.Revision {
		t.Fatalf("WaitGone = at %d, exact %v, done %v, %v; want done, found by a read at or after %d", at, exact, done, err, del.Header.Revision)
	}
}

// A waiter whose key may hold once allowed of its blockers remain watches
// the newest allowed+1 of them: each deletion reaches at most that many
// waiters, whatever the queue's length. One of them going leaves it done.
func TestWaitGoneWatchesTheNewestOfItsBlockers(t *testing.T) {
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/waitgone-%d/v1/semaphore/x/", time.Now().UnixNano())
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cli.Put(ctx, prefix+k, ""); err != nil {
			t.Fatal(err)
		}
	}
	g, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	s := stream(t, cli)
	type result struct {
		at          int64
		exact, done bool
		err         error
	}
	ch := make(chan result, 1)
	go func() {
		at, exact, done, err := queue.WaitGone(ctx, cli, s, prefix+"own", 0, g.Kvs, 1, g.Header.Revision) // a limit of 2: one of 3 must go
		ch <- result{at, exact, done, err}
	}()
	// The oldest is not watched: its deletion leaves two, which still
	// block, and the wait goes on; the newest's tells.
	if _, err := cli.Delete(ctx, prefix+"a"); err != nil {
		t.Fatal(err)
	}
	del, err := cli.Delete(ctx, prefix+"c")
	if err != nil {
		t.Fatal(err)
	}
	got := <-ch
	if got.err != nil || got.at < del.Header.Revision || got.exact && got.at != del.Header.Revision || got.done {
		t.Fatalf("WaitGone = %+v, want the deletion of c at %d, not done (a's deletion unseen: read again)", got, del.Header.Revision)
	}
}
