package mutex_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// eventClient counts the watch events it receives, by type.
func eventClient(t *testing.T, puts, deletes *atomic.Int64) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Watch/Watch" {
					return cs, err
				}
				return &eventStream{ClientStream: cs, puts: puts, deletes: deletes}, nil
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

type eventStream struct {
	grpc.ClientStream
	puts, deletes *atomic.Int64
}

func (s *eventStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*etcdserverpb.WatchResponse); ok && err == nil {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT {
				s.puts.Add(1)
			} else {
				s.deletes.Add(1)
			}
		}
	}
	return err
}

// A session's namespace watch carries deletions only: another session's
// acquisitions in the namespace cost it no event (issue 34: with puts, 20
// sessions holding 100,000 locks in one namespace received 20 events per
// lock taken, and 50 processes about 150), while their releases still
// reach it, and a deletion still ends the hold it is of.
func TestNamespaceWatchCarriesNoPuts(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	var puts, deletes atomic.Int64
	wcli := eventClient(t, &puts, &deletes)
	ws, err := bsession.New(wcli, bsession.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	mine, err := newMutex(t, wcli, "nswatch-mine", mutex.WithSession(ws)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The watch is established once a deletion reaches it.
	probe, err := newMutex(t, client(t), "nswatch-probe").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return deletes.Load() >= 1 })

	other := client(t)
	osess, err := bsession.New(other, bsession.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = osess.Close() })
	const n = 50
	p0, d0 := puts.Load(), deletes.Load()
	var held []*mutex.Lock
	for i := range n {
		l, err := newMutex(t, other, fmt.Sprintf("nswatch-%d", i), mutex.WithSession(osess)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return deletes.Load()-d0 >= n })
	if got := puts.Load() - p0; got != 0 {
		t.Errorf("the namespace watch of a session holding one lock received %d puts while another took and released %d locks, want 0", got, n)
	}

	// It still ends its own hold on a deletion.
	if _, err := other.Delete(ctx, mine.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, mine.Done(), 5*time.Second, "the hold's end after its key's deletion")
}
