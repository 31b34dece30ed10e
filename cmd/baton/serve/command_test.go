package serve_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

var servingRE = regexp.MustCompile(`serving on (http://\S+)`)

// baton serve as a command: it serves, shows /metrics, and on its
// context's end (SIGINT, SIGTERM) ends each hold with lost
// SERVER_SHUTDOWN before it exits 0.
func TestServeCommandServesAndShutsDownEndingEveryHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := "servecmd"
	var out, errOut clitest.SyncBuffer
	code := make(chan int, 1)
	go func() { code <- clitest.RunTo(ctx, ns, &out, &errOut, "serve", "--listen", "127.0.0.1:0") }()
	var url string
	clitest.WaitFor(t, func() bool {
		if m := servingRE.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		return url != "" || strings.Contains(errOut.String(), "baton:")
	})
	if url == "" {
		t.Fatalf("not serving: %s %s", out.String(), errOut.String())
	}
	hc := h2cClient()
	defer hc.CloseIdleConnections()
	c := batonv1connect.NewBatonServiceClient(hc, url, connect.WithGRPC())
	sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second) // outlives the server's
	defer scancel()
	s := holdOn(sctx, c, &batonv1.HoldRequest{Names: []string{"cmd"}})
	h := s.held(t)
	if !strings.HasPrefix(h.Keys[0], "/"+ns+"/v1/lock/cmd/") {
		t.Fatalf("key %s: not in the --namespace", h.Keys[0])
	}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `baton_serve_holds{state="held"} 1`) {
		t.Fatalf("/metrics: %d\n%s", resp.StatusCode, body)
	}
	cancel() // as SIGTERM does
	if m := s.next(t); m.GetLost().GetCause() != batonv1.Cause_CAUSE_SERVER_SHUTDOWN {
		t.Fatalf("got %v, want lost SERVER_SHUTDOWN", m)
	}
	if rc := <-code; rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut.String())
	}
	if !strings.Contains(out.String(), "shutting down") {
		t.Fatalf("output: %s", out.String())
	}
	cli := clitest.Srv.Client(t)
	if r, err := cli.Get(context.Background(), "/"+ns+"/v1/lock/", clientv3WithPrefix()); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("keys left: %v %v", r, err)
	}
}

func TestServeFlagsAreCheckedBeforeAnything(t *testing.T) {
	ctx := ctxT(t)
	for _, args := range [][]string{
		{"serve", "--listen", "0.0.0.0:0"},
		{"serve", "--tls-cert", "x.pem"},
		{"serve", "--max-holds", "0"},
		{"serve", "--max-ttl", "1s"},
		{"serve", "--read-timeout", "0s"},
		{"serve", "--shutdown-timeout", "0s"},
		{"serve", "--listen", "nonsense"},
		{"serve", "--policy", "/nonexistent/policy.yaml"},
	} {
		code, _, stderr := clitest.Run(ctx, t, "", args...)
		if code != 64 {
			t.Errorf("%v: exit %d (%s), want 64", args, code, stderr)
		}
	}
}
