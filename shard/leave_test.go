package shard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// refusingClient is a client whose transactions deleting a key that ends
// in suffix are answered refuse(n) (n counts them from 1) instead of
// being sent, while refuse returns an error.
func refusingClient(t *testing.T, suffix string, refuse func(n int) error) *clientv3.Client {
	t.Helper()
	var mu sync.Mutex
	n := 0
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if tr, ok := req.(*etcdserverpb.TxnRequest); ok {
					for _, op := range tr.Success {
						if d := op.GetRequestDeleteRange(); d != nil && strings.HasSuffix(string(d.Key), suffix) {
							mu.Lock()
							n++
							err := refuse(n)
							mu.Unlock()
							if err != nil {
								return err
							}
						}
					}
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestLeaveRetriesTheMemberKeyThroughAnOutage: a member on a shared
// session (its lease outlives the Run) whose Run ends while etcd refuses
// its member key's deletion for longer than one attempt's bound (2.5 s of
// an outage) must not return with its key left: every other member would
// go on assigning shards to a member nobody runs, and those shards would
// stay unowned for as long as the session lives. Run retries the deletion
// until it succeeds, and the other member then owns every shard.
func TestLeaveRetriesTheMemberKeyThroughAnOutage(t *testing.T) {
	const n, group = 4, "leave-outage"
	var first time.Time
	refused := 0
	cli := refusingClient(t, "/m/a", func(int) error {
		if first.IsZero() {
			first = time.Now()
		}
		if time.Since(first) < 2500*time.Millisecond {
			refused++
			return rpctypes.ErrGRPCNoLeader // an outage: transient
		}
		return nil
	})
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	log := &eventLog{}
	a := start(t, newGroup(t, cli, group, n, shard.WithSession(sess)), "a", log, nil)
	gb := newGroup(t, client(t), group, n)
	start(t, gb, "b", log, nil)
	settled(t, gb, "a", "b")

	if err := a.stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled (the key was deleted once the outage ended)", err)
	}
	if keys := etcdtest.Keys(t, client(t), gb.Prefix()+"m/a"); len(keys) != 0 {
		t.Fatalf("Run returned after %d refused deletions, but its member key is still live on the shared lease: %v", refused, keys)
	}
	settled(t, gb, "b")
}

// TestLeaveSaysWhenTheMemberKeyStays: when etcd refuses the member key's
// deletion for good (permission denied), Run returns an error that says
// the key stays, instead of ctx's error and a log line.
func TestLeaveSaysWhenTheMemberKeyStays(t *testing.T) {
	const n, group = 2, "leave-refused"
	cli := refusingClient(t, "/m/a", func(int) error { return rpctypes.ErrGRPCPermissionDenied })
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, cli, group, n, shard.WithSession(sess))
	a := start(t, g, "a", &eventLog{}, nil)
	settled(t, g, "a")
	err = a.stop(t)
	if !errors.Is(err, rpctypes.ErrPermissionDenied) || !strings.Contains(err.Error(), "member key") {
		t.Fatalf("Run: %v, want an error that says the member key stays (permission denied)", err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, client(t), g.Prefix()); len(keys) != 0 {
		t.Fatalf("keys after the session's close: %v", keys)
	}
}
