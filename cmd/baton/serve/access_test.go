package serve_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/rbac"
)

// serveAlso serves the env's Server on ln too (TLS when cfg is set), until
// the test ends.
func serveAlso(t *testing.T, e *env, ln net.Listener, cfg *tls.Config) {
	t.Helper()
	hs := serve.HTTPServer(e.srv.Handler(), cfg != nil, cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if cfg != nil {
			_ = hs.ServeTLS(ln, "", "")
		} else {
			_ = hs.Serve(ln)
		}
	}()
	t.Cleanup(func() { _ = hs.Close(); <-done })
}

func TestEveryProtocolHoldsAndReleases(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	for _, p := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect+json", []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect+proto", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		c := batonv1connect.NewBatonServiceClient(e.hc, e.url, p.opts...)
		s := holdOn(ctx, c, &batonv1.HoldRequest{Names: []string{"proto-" + p.name}})
		h := s.held(t)
		if _, err := c.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId})); err != nil {
			t.Fatalf("%s: heartbeat: %v", p.name, err)
		}
		if _, err := c.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
			t.Fatalf("%s: release: %v", p.name, err)
		}
		if m := s.next(t); m.GetReleased() == nil {
			t.Fatalf("%s: %v, want released", p.name, m)
		}
		if err := s.end(t); err != nil {
			t.Fatalf("%s: end: %v", p.name, err)
		}
	}
	// grpc.health.v1 over Connect's JSON, as a probe without a gRPC stack sends it.
	resp, err := e.hc.Post(e.url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), "SERVING_STATUS_SERVING") {
		t.Fatalf("health: %s", body)
	}
}

func TestBadRequestsOnTheWireAreInvalidArgument(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"a", "a"}}).end(t)
	wantCode(t, err, connect.CodeInvalidArgument, "names[1]")
	_, err = e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: "short"}))
	wantCode(t, err, connect.CodeInvalidArgument, "hold_id")
	_, err = e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: strings.Repeat("0", 32)}))
	wantCode(t, err, connect.CodeNotFound, "hold_id")
	_, err = e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument, "target")
	err = e.shards(ctx, &batonv1.ShardsRequest{Group: "x", Member: "m"}).end(t)
	wantCode(t, err, connect.CodeInvalidArgument, "count")
	_, err = e.client.Fence(ctx, connect.NewRequest(&batonv1.FenceRequest{Resource: "r"}))
	wantCode(t, err, connect.CodeInvalidArgument, "op")
	huge := &batonv1.HoldRequest{Names: []string{"a"}, Identity: strings.Repeat("x", serve.MaxRequestBytes)}
	err = e.hold(ctx, huge).end(t)
	wantCode(t, err, connect.CodeResourceExhausted, "")
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("keys written by refused requests: %v", k)
	}
}

func TestMaxHoldsAndMaxHoldsPerIdentityAreResourceExhausted(t *testing.T) {
	e := start(t, func(c *serve.Config) { c.MaxHolds, c.MaxHoldsPerIdentity = 2, 1 })
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"a"}, Identity: "svc-a"})
	a.held(t)
	err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"a2"}, Identity: "svc-a"}).end(t)
	wantCode(t, err, connect.CodeResourceExhausted, "")
	b := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"b"}, Identity: "svc-b"})
	b.held(t)
	err = e.hold(ctx, &batonv1.HoldRequest{Names: []string{"c"}, Identity: "svc-c"}).end(t)
	wantCode(t, err, connect.CodeResourceExhausted, "")
	a.cancel()
	// The stream's end frees its place once its handler returns: retry
	// until then (a refused try has no effect).
	var c *stream
	clitest.WaitFor(t, func() bool {
		c = e.hold(ctx, &batonv1.HoldRequest{Names: []string{"c"}, Identity: "svc-c"})
		select {
		case m := <-c.events:
			return m.GetHeld() != nil
		case err := <-c.done:
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("after a stream ended: %v", err)
			}
			return false
		}
	})
}

func TestPolicyRefusesAnUnlistedIdentityWithNothingWritten(t *testing.T) {
	var ns string
	e := start(t, func(c *serve.Config) {
		ns = c.Namespace
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: ns, Contenders: []string{"svc-a"}, Observers: []string{"viewer"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, Identity: "svc-b"}).end(t)
	wantCode(t, err, connect.CodePermissionDenied, "")
	err = e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, Identity: "viewer"}).end(t)
	wantCode(t, err, connect.CodePermissionDenied, "")
	err = e.hold(ctx, &batonv1.HoldRequest{Namespace: "other", Names: []string{"x"}, Identity: "svc-a"}).end(t)
	wantCode(t, err, connect.CodePermissionDenied, "")
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("refused holds wrote %v", k)
	}
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, Identity: "svc-a"})
	s.held(t)
}

// A Unix socket's peer is known by its user ID: its default identity, and
// the only caller that may heartbeat or release its holds.
func TestUnixSocketCallerIsKnownByItsUID(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	dir, err := os.MkdirTemp("", "baton-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveAlso(t, e, ln, nil)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	uc := batonv1connect.NewBatonServiceClient(&http.Client{Transport: tr}, "http://sidecar", connect.WithProtoJSON())
	s := holdOn(ctx, uc, &batonv1.HoldRequest{Names: []string{"sock"}})
	h := s.held(t)
	resp, err := e.etcd.Get(ctx, h.Keys[0])
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprintf("uid:%d", os.Getuid()) {
		t.Fatalf("identity: %v %v, want uid:%d", resp, err, os.Getuid())
	}
	_, err = e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId}))
	wantCode(t, err, connect.CodePermissionDenied, "hold_id")
	if _, err := uc.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
		t.Fatal(err)
	}
}

// With mTLS the client certificate's CN is the identity: another one
// asked for is refused, and the policy is checked on the CN.
func TestMTLSIdentityIsTheCertificatesCN(t *testing.T) {
	dir := t.TempDir()
	ca, err := rbac.OpenDevCA(dir, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvFiles, err := ca.IssueServer([]string{"127.0.0.1"}, rbac.CertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srvFiles.CA = ca.CertFile()
	scfg, err := srvFiles.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, func(c *serve.Config) {
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: c.Namespace, Contenders: []string{"svc-a"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAlso(t, e, ln, scfg)
	client := func(user string) (batonv1connect.BatonServiceClient, *http.Client) {
		files, err := ca.IssueClient(user, rbac.CertOptions{})
		if err != nil {
			t.Fatal(err)
		}
		files.CA = ca.CertFile()
		ccfg, err := files.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		hc := tlsClient(ccfg)
		t.Cleanup(hc.CloseIdleConnections)
		return batonv1connect.NewBatonServiceClient(hc, "https://"+ln.Addr().String(), connect.WithGRPC()), hc
	}
	a, _ := client("svc-a")
	b, _ := client("svc-b")
	err = holdOn(ctx, a, &batonv1.HoldRequest{Names: []string{"m"}, Identity: "someone-else"}).end(t)
	wantCode(t, err, connect.CodePermissionDenied, "")
	err = holdOn(ctx, b, &batonv1.HoldRequest{Names: []string{"m"}}).end(t)
	wantCode(t, err, connect.CodePermissionDenied, "")
	s := holdOn(ctx, a, &batonv1.HoldRequest{Names: []string{"m"}})
	h := s.held(t)
	resp, err := e.etcd.Get(ctx, h.Keys[0])
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "svc-a" {
		t.Fatalf("identity: %v %v, want svc-a", resp, err)
	}
	_, err = b.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId}))
	wantCode(t, err, connect.CodePermissionDenied, "hold_id")
	if _, err := a.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId})); err != nil {
		t.Fatal(err)
	}
	// Without a client certificate the handshake fails.
	nc := tlsClient(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the point: no client certificate
	t.Cleanup(nc.CloseIdleConnections)
	if _, err := nc.Get("https://" + ln.Addr().String() + "/"); err == nil {
		t.Fatal("a caller without a certificate was served")
	}
}
