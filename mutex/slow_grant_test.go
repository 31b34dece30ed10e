package mutex_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// A lease whose grant was answered late (here 3 s of a 5 s TTL on the
// session's clock, as when a partition heals under a storm of grants) is
// valid for what is left of sent + TTL − margin, 1 s here; its first
// renewal goes at once rather than TTL/3 after the answer, which would be
// after that deadline: every lock taken on it was lost again (issue 34's
// storm: 93–516 locks lost again after the heal, "validity deadline
// passed"). Each renewal is due TTL/3 after the send of the last one
// acknowledged.
func TestLeaseGrantedLateRenewsAtOnce(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	clock := newManualClock()
	var keepalives atomic.Int64
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if method == "/etcdserverpb.Lease/LeaseGrant" {
					clock.Advance(3 * time.Second) // the answer came late
				}
				return err
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
					keepalives.Add(1)
				}
				return streamer(ctx, desc, cc, method, opts...)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second), config.Clock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	l, err := newMutex(t, cli, "slow-grant", mutex.WithSession(sess)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still: only a renewal due already is sent, and it
	// moves the deadline past the 1 s the grant left.
	waitFor(t, func() bool { return keepalives.Load() >= 1 && l.Deadline().Sub(clock.Now()) > 3*time.Second })
	clock.Advance(2 * time.Second) // past the grant's deadline
	select {
	case <-l.Done():
		t.Fatalf("the lock was lost past the late grant's deadline although renewed: %v", context.Cause(l.Context()))
	case <-time.After(100 * time.Millisecond):
	}
}
