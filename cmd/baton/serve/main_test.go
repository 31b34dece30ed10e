package serve_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/batonhq/baton/cmd/baton/cli"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
)

func TestMain(m *testing.M) { clitest.RunTests(m, cli.Main) }

var nsSeq atomic.Int64

// env is one Server on a loopback listener, in a namespace of its own.
type env struct {
	t      *testing.T
	etcd   *clientv3.Client
	ns     string
	srv    *serve.Server
	reg    *prometheus.Registry
	url    string
	client batonv1connect.BatonServiceClient
	hc     *http.Client
	stop   func()
}

// start serves a Server (cfg adjusted by each opt) over plaintext TCP; the
// cleanup shuts it down and closes every connection.
func start(t *testing.T, opts ...func(*serve.Config)) *env {
	t.Helper()
	e := &env{t: t, etcd: clitest.Srv.Client(t), ns: fmt.Sprintf("serve%d", nsSeq.Add(1)), reg: prometheus.NewRegistry()}
	cfg := serve.Config{Client: e.etcd, Namespace: e.ns, Registerer: e.reg}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := serve.HTTPServer(srv.Handler(), false, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	e.url = "http://" + ln.Addr().String()
	e.hc = h2cClient()
	e.client = batonv1connect.NewBatonServiceClient(e.hc, e.url, connect.WithProtoJSON())
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		_ = hs.Shutdown(ctx)
		_ = hs.Close()
		<-done
		e.hc.CloseIdleConnections()
	}
	t.Cleanup(e.stop)
	return e
}

// h2cClient speaks HTTP/1.1 and, for gRPC, HTTP/2 without TLS.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP1(true)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

func tlsClient(cfg *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stream is one open Hold, read by a goroutine into events.
// recv reads a server stream in a goroutine of its own: every message
// into events, then the stream's end (nil, or its error) into done.
type recv[T any] struct {
	events chan *T
	done   chan error
	cancel context.CancelFunc
	sent   time.Time // when the request was sent
}

// open makes the call in the reading goroutine (it returns once the first
// message's headers arrive) and reads what it streams.
func open[T any](ctx context.Context, buf int, call func(context.Context) (*connect.ServerStreamForClient[T], error)) *recv[T] {
	ctx, cancel := context.WithCancel(ctx)
	s := &recv[T]{events: make(chan *T, buf), done: make(chan error, 1), cancel: cancel, sent: time.Now()}
	go func() {
		st, err := call(ctx)
		if err != nil {
			s.done <- err
			return
		}
		defer func() { _ = st.Close() }()
		for st.Receive() {
			s.events <- st.Msg()
		}
		s.done <- st.Err()
	}()
	return s
}

// stream is a Hold's.
type stream struct{ *recv[batonv1.HoldResponse] }

func (e *env) hold(ctx context.Context, req *batonv1.HoldRequest) *stream {
	return holdOn(ctx, e.client, req)
}

func holdOn(ctx context.Context, c batonv1connect.BatonServiceClient, req *batonv1.HoldRequest) *stream {
	return &stream{open(ctx, 16, func(ctx context.Context) (*connect.ServerStreamForClient[batonv1.HoldResponse], error) {
		return c.Hold(ctx, connect.NewRequest(req))
	})}
}

// next is the stream's next message; it fails the test when the stream
// ends first.
func (s *recv[T]) next(t *testing.T) *T {
	t.Helper()
	select {
	case m := <-s.events:
		return m
	case err := <-s.done:
		select { // the reader queues every message before the end
		case m := <-s.events:
			s.done <- err
			return m
		default:
		}
		t.Fatalf("stream ended before a message: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no message in 30 s")
	}
	return nil
}

func (s *stream) held(t *testing.T) *batonv1.Held {
	t.Helper()
	m := s.next(t)
	if m.GetHeld() == nil {
		t.Fatalf("first message %v, want held", m)
	}
	return m.GetHeld()
}

// end waits for the stream's end and returns its error (nil for a clean
// end), failing on any message still unread.
func (s *recv[T]) end(t *testing.T) error {
	t.Helper()
	select {
	case m := <-s.events:
		t.Fatalf("unexpected message %v", m)
	case err := <-s.done:
		select {
		case m := <-s.events:
			t.Fatalf("unexpected message %v", m)
		default:
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("stream did not end in 30 s")
	}
	return nil
}

func wantCode(t *testing.T, err error, code connect.Code, field string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v: code %v, want %v", err, connect.CodeOf(err), code)
	}
	var ce *connect.Error
	if field != "" && (!errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), field+":")) {
		t.Fatalf("error %v: want the message to start with %q", err, field+":")
	}
}

// lockKeys is the lock keys of the env's namespace with their values.
func (e *env) lockKeys(t *testing.T) map[string]string {
	t.Helper()
	resp, err := e.etcd.Get(context.Background(), "/"+e.ns+"/v1/lock/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// waitNoLockKeys waits, by watching, until the namespace holds no lock key.
func (e *env) waitNoLockKeys(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := "/" + e.ns + "/v1/lock/"
	for {
		resp, err := e.etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("lock keys still there: %v", err)
		}
		if resp.Count == 0 {
			return
		}
		wch := e.etcd.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-ctx.Done():
			t.Fatalf("lock keys still there: %v", e.lockKeys(t))
		}
	}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }
