package rwmutex_test

import (
	"context"
	"slices"
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
	"github.com/batonhq/baton/rwmutex"
	bsession "github.com/batonhq/baton/session"
)

// A writer behind two readers watches the newer alone (each deletion
// reaches one waiter behind it: TestWaitGoneWatchesTheNewestOfItsBlockers);
// when it goes the writer reads what is left ahead, and after the last
// reader's deletion, released or deleted by an operator, it reads once
// before it holds: that reader's head start. Reads are Range requests and
// transactions of reads only. When r1 goes before the writer's watch of it
// begins (the writer's read after r2's deletion found r1, and the
// deletion came between that read and the watch's start), the writer
// reads r1's key alone too, the gap between its read and its watch
// (queue.WaitGone): that read is not the head start's and is allowed once.
func TestWriterReadsOnceAfterTheLastReaderWent(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	admin := client(t)
	var nreads atomic.Int64
	var mu sync.Mutex
	type answer struct {
		rev    int64
		points []string // a transaction's keys when it reads single keys alone
	}
	var reads []answer // in the order answered
	wcli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				t, ok := req.(*etcdserverpb.TxnRequest)
				read := method == "/etcdserverpb.KV/Range" || ok && readsOnly(t)
				if read {
					nreads.Add(1)
				}
				err := invoker(ctx, method, req, reply, cc, opts...)
				if r, ok := reply.(interface {
					GetHeader() *etcdserverpb.ResponseHeader
				}); read && err == nil && ok {
					rd := answer{rev: r.GetHeader().GetRevision()}
					if ok {
						for _, op := range t.Success {
							rr := op.GetRequestRange()
							if len(rr.GetRangeEnd()) > 0 || len(t.Failure) > 0 {
								rd.points = nil
								break
							}
							rd.points = append(rd.points, string(rr.GetKey()))
						}
					}
					mu.Lock()
					reads = append(reads, rd)
					mu.Unlock()
				}
				return err
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wcli.Close() })
	waiting := make(chan int64, 1) // the reads so far, as the writer starts its wait
	sess, err := bsession.New(wcli, bsession.WithTTL(5*time.Second), config.Hooks(&core.Hooks{
		BeforeWait: func(string) { waiting <- nreads.Load() },
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	// The writer's session holds in the namespace: its watch stream runs.
	other, err := newRW(t, wcli, "release-mark-rw-other", rwmutex.WithSession(sess)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Unlock(context.Background()) })
	// A namespace's first release ever puts its first mark and has none to
	// delete yet, so it is not marked to a watch of deletions: one before,
	// with a waiter behind it (a holder alone in its queue releases
	// without a mark), whatever tests ran in the namespace before.
	fm := newRW(t, client(t), "release-mark-rw-first")
	first, err := fm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		l, err := newRW(t, client(t), "release-mark-rw-first").Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		second <- err
	}()
	for {
		resp, err := admin.Get(ctx, fm.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"both released", "one deleted by an admin"} {
		a := newRW(t, client(t), "release-mark-rw")
		b := newRW(t, client(t), "release-mark-rw")
		w := newRW(t, wcli, "release-mark-rw", rwmutex.WithSession(sess))
		r1, err := a.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := b.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var wl *rwmutex.Lock
		go func() {
			var err error
			wl, err = w.Lock(ctx)
			got <- err
		}()
		var before int64 // from here the writer waits
		select {
		case before = <-waiting:
		case err := <-got:
			t.Fatalf("%s: Lock returned before it waited: %v", how, err)
		}
		mu.Lock()
		from := len(reads)
		mu.Unlock()
		// r2 released first, then r1 released or deleted: the writer's wait
		// ends on r1's deletion alone, whichever way it went (r2's release
		// after a read the admin's delete made would cost a read of its mark).
		if err := r2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// r1 goes once the writer read after r2's deletion and found r1
		// ahead: its wait is r1's then (r1 gone before that read would be
		// seen by that read and by the head start's).
		r2Rev := releaseRev(t, ctx, admin, r2.Key(), int64(r2.Token()))
		for read := false; !read; {
			mu.Lock()
			for _, r := range reads[from:] {
				read = read || r.rev >= r2Rev
			}
			mu.Unlock()
			if !read {
				select {
				case <-ctx.Done():
					t.Fatalf("%s: the writer did not read after r2's deletion at %d", how, r2Rev)
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		var delRev int64
		if how == "both released" {
			err = r1.Unlock(ctx)
			delRev = releaseRev(t, ctx, admin, r1.Key(), int64(r1.Token()))
		} else {
			var resp *clientv3.DeleteResponse
			resp, err = admin.Delete(ctx, r1.Key())
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
		n := nreads.Load() - before
		// Reads that saw the delete: a serializable read that etcd served
		// from before it (its watch notifies before the write's revision
		// is the store's) is answered again linearizably, one read.
		mu.Lock()
		saw, gap := 0, 0
		for _, r := range reads[from:] {
			switch {
			case r.rev < delRev:
			case slices.Equal(r.points, []string{r1.Key()}):
				gap++
			default:
				saw++
			}
		}
		mu.Unlock()
		if saw != 1 || gap > 1 || n > 4 {
			t.Errorf("%s: the writer read %d times (%d at or after the last reader's deletion at %d, and %d of r1's key alone) before it held, want 1 that saw it (that reader's head start), 1 of the gap before its watch at most, 2 more at most", how, n, saw, delRev, gap)
		}
		if err := wl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// releaseRev is the revision that deleted key, created at rev.
func releaseRev(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, rev int64) int64 {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		for _, ev := range wr.Events {
			return ev.Kv.ModRevision
		}
	}
	t.Fatalf("no deletion of %s seen: %v", key, ctx.Err())
	return 0
}

// readsOnly says whether t only reads.
func readsOnly(t *etcdserverpb.TxnRequest) bool {
	for _, op := range append(t.Success, t.Failure...) {
		if op.GetRequestRange() == nil {
			return false
		}
	}
	return true
}
