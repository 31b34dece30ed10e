package harness

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Method names the counter reports.
const (
	MethodKeepAlive = "/etcdserverpb.Lease/LeaseKeepAlive"
	// MethodWatch is a watch stream's: its creates and cancels.
	MethodWatch = "/etcdserverpb.Watch/Watch"
)

// Counter counts the requests a client sends, by gRPC method: every unary
// call, and every message sent on a stream (a lease renewal, a watch
// creation or cancellation).
type Counter struct {
	mu sync.Mutex
	n  map[string]int64
	// events counts the watch events received.
	events atomic.Int64
}

// Events is the number of watch events the client received.
func (c *Counter) Events() int64 { return c.events.Load() }

// NewCounter returns a zeroed counter.
func NewCounter() *Counter { return &Counter{n: make(map[string]int64)} }

func (c *Counter) add(method string) {
	c.mu.Lock()
	c.n[method]++
	c.mu.Unlock()
}

// Reset zeroes every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// DialOptions install the counter on a client. The counter sits inside
// clientv3's own retry interceptor, so it counts every attempt.
func (c *Counter) DialOptions() []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.add(method)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &countedStream{ClientStream: s, c: c, method: method}, nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

type countedStream struct {
	grpc.ClientStream
	c      *Counter
	method string
}

func (s *countedStream) SendMsg(m any) error {
	s.c.add(s.method)
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*etcdserverpb.WatchResponse); ok && err == nil {
		s.c.events.Add(int64(len(wr.Events)))
	}
	return err
}

// NewClient connects to endpoint; counter may be nil.
func NewClient(endpoint string, counter *Counter) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if counter != nil {
		cfg.DialOptions = counter.DialOptions()
	}
	return clientv3.New(cfg)
}

// RequestsExcept sums the counts of every method but the excluded ones.
func RequestsExcept(counts map[string]int64, exclude ...string) int64 {
	var sum int64
	for m, n := range counts {
		skip := false
		for _, e := range exclude {
			skip = skip || m == e
		}
		if !skip {
			sum += n
		}
	}
	return sum
}
