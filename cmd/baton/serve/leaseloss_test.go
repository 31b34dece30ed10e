package serve_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
)

// A hold lost by the library (its lease's renewals refused twice, etcd
// itself reachable) while its caller is cut off: the caller never hears
// lost, and counts on the validity its last heartbeat's reply gave, so
// the key (neither revoked with the lease nor deleted by the server)
// outlives that validity: nobody else can acquire while the caller may
// still believe it holds.
func TestALeaseLostUnderACutOffCallerKeepsItsKeyPastTheCallersValidity(t *testing.T) {
	var refuse atomic.Bool
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: clitest.Srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if method == "/etcdserverpb.Lease/LeaseKeepAlive" && refuse.Load() {
					return nil, status.Error(codes.Unavailable, "test: renewal refused")
				}
				return streamer(ctx, desc, cc, method, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	e := start(t, func(c *serve.Config) { c.Client = cli })
	ctx := ctxT(t)
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"renewals"}, Ttl: dur(3 * time.Second), Identity: "cut"})
	h := s.held(t)
	key := h.GetKeys()[0]
	resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId}))
	if err != nil {
		t.Fatal(err)
	}
	// The caller's validity, by its rule: the reply's validity from the
	// heartbeat's send, which is before now.
	valid := time.Now().Add(resp.Msg.GetValidity().AsDuration())
	// From here the caller is cut off: no heartbeat, nothing read.
	w := e.etcd.Watch(ctx, key)
	refuse.Store(true)
	var gone time.Time
	for wr := range w {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				gone = time.Now()
			}
		}
		if !gone.IsZero() || wr.Err() != nil {
			break
		}
	}
	if gone.IsZero() {
		t.Fatal("the key's deletion was not seen")
	}
	t.Logf("key deleted %v after the caller's validity ran out", gone.Sub(valid).Round(time.Millisecond))
	if gone.Before(valid) {
		t.Fatalf("the key went %v before the validity the cut-off caller was given ran out", valid.Sub(gone).Round(time.Millisecond))
	}
}
