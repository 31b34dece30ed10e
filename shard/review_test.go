package shard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// memberPutClient is a client that calls onPut after each Txn that puts a
// key ending in suffix has been applied and answered, before the caller
// gets the answer: the place where a caller's ctx ending loses the reply.
func memberPutClient(t *testing.T, suffix string, onPut func(n int)) *clientv3.Client {
	t.Helper()
	var puts atomic.Int32
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if tr, ok := req.(*etcdserverpb.TxnRequest); ok && err == nil {
					for _, op := range tr.Success {
						if p := op.GetRequestPut(); p != nil && strings.HasSuffix(string(p.Key), suffix) {
							onPut(int(puts.Add(1)))
						}
					}
				}
				return err
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestRunEndingDuringJoinLeavesNoMemberKey: Run's ctx ends just after its
// join's put was applied (the reply arrives after the ctx ended, so the
// read that follows fails). Run returns, but must not leave its member key
// behind: a live member key on a lease that outlives the Run (a shared
// session) makes every other member give that member shards nobody runs.
func TestRunEndingDuringJoinLeavesNoMemberKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := memberPutClient(t, "/m/a", func(int) { cancel() })
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	g := newGroup(t, cli, "review-join-cancel", 4, shard.WithSession(sess))
	err = g.Run(ctx, "a", func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if keys := etcdtest.Keys(t, client(t), g.Prefix()+"m/"); len(keys) != 0 {
		t.Errorf("Run returned but left its member key behind: %v", keys)
	}
	if ms, err := g.Members(etcdtest.Context(t, 5*time.Second)); err != nil || len(ms) != 0 {
		t.Errorf("members after Run returned: %v (%v), want none", ms, err)
	}
}

// TestRunEndingDuringRejoinLeavesNoMemberKey: the same for the rejoin after
// a lost lease: the member's lease is revoked, the loop joins again on the
// session's next lease, and Run's ctx ends just after that put applied.
func TestRunEndingDuringRejoinLeavesNoMemberKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	cli := memberPutClient(t, "/m/a", func(n int) {
		if n == 2 { // the rejoin's put
			once.Do(cancel)
		}
	})
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	g := newGroup(t, cli, "review-rejoin-cancel", 4, shard.WithSession(sess))
	m := &member{name: "a", g: g, cancel: cancel, done: make(chan error, 1), owned: map[int]*shard.Shard{}, log: &eventLog{}}
	go func() { m.done <- g.Run(ctx, "a", m.work(nil)) }()
	t.Cleanup(func() { m.stop(t) })
	settled(t, g, "a")
	if _, err := client(t).Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-m.done:
		close(m.done)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
	if keys := etcdtest.Keys(t, client(t), g.Prefix()+"m/"); len(keys) != 0 {
		t.Errorf("Run returned but left its member key behind: %v", keys)
	}
}
