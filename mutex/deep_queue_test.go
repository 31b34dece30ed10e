package mutex_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// A waiter queued behind more keys than its enqueue reads (queue.MaxRead)
// knows only the newest of them. When the one just ahead of it goes with
// its holder's release, that one held, so every older key is gone: the
// waiter holds without reading the queue again (a read etcd serves by
// walking the whole queue, once per handoff of a long queue). FIFO and one
// holder at a time, as always.
func TestDeepWaiterHoldsWithoutReadingTheQueue(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const name = "deep-queue"
	const ahead = 40 // more than queue.MaxRead (32)
	var reads atomic.Int64
	count := func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok {
			for _, op := range tr.Success {
				if r := op.GetRequestRange(); r != nil && r.MaxCreateRevision > 0 {
					reads.Add(1) // a read of the keys older than one's own
				}
			}
		}
		return invoker(ictx, method, req, reply, cc, opts...)
	}
	wcli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	defer wcli.Close()

	cli := client(t)
	holder, err := newMutex(t, cli, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	turns := make(chan int, ahead+1)
	var holding atomic.Int32
	queue := func(i int, m *mutex.Mutex) {
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				turns <- -1
				return
			}
			if holding.Add(1) != 1 {
				t.Errorf("waiter %d holds beside another", i)
			}
			holding.Add(-1)
			turns <- i
			_ = l.Unlock(ctx)
		}()
		waitFor(t, func() bool { w, _ := m.Waiters(ctx); return len(w) == i+1 })
	}
	for i := range ahead {
		queue(i, newMutex(t, client(t), name))
	}
	queue(ahead, newMutex(t, wcli, name))
	before := reads.Load()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range ahead + 1 {
		select {
		case i := <-turns:
			order = append(order, i)
		case <-time.After(20 * time.Second):
			t.Fatalf("the queue did not drain: %v", order)
		}
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("order %v: not FIFO", order)
		}
	}
	if n := reads.Load() - before; n != 0 {
		t.Fatalf("the deep waiter read the queue %d times while it waited, want none", n)
	}
}
