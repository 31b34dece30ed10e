package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/etcdtest"
)

func httpGet(t *testing.T, url string) (int, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitStatus polls url until it answers want, for at most 10 s.
func waitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, err := httpGet(t, url)
		if err == nil && code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q %v, want %d", url, code, body, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetricsListenServesElectMetricsHealthAndLeader(t *testing.T) {
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runTo(ctx, "metrics-elect", &out, &errOut, "elect", "--metrics-listen", addr, "svc", "host-a")
	}()
	base := "http://" + addr
	waitStatus(t, base+"/leader", http.StatusOK)
	if body := waitStatus(t, base+"/healthz", http.StatusOK); body != "ok\n" {
		t.Fatalf("/healthz = %q", body)
	}
	metrics := waitStatus(t, base+"/metrics", http.StatusOK)
	for _, want := range []string{
		`baton_election_is_leader{name="svc",namespace="metrics-elect"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	cancel()
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Fatalf("elect exited %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("elect did not exit")
	}
	if _, _, err := httpGet(t, base+"/healthz"); err == nil {
		t.Fatal("the metrics listener outlived the command")
	}
}

func TestMetricsListenLockNotHoldingThenHolding(t *testing.T) {
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "metrics-lock"
	ctx := testContext(t)
	hctx, release := context.WithCancel(ctx)
	holding := make(chan int, 1)
	go func() { holding <- runTo(hctx, ns, &syncBuffer{}, &syncBuffer{}, "lock", "job") }()
	etcdtest.WaitKeys(t, srv.Client(t), "/"+ns+"/v1/lock/", 1)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- runTo(wctx, ns, &syncBuffer{}, &errOut, "lock", "--metrics-listen", addr, "job") }()
	base := "http://" + addr
	if body := waitStatus(t, base+"/leader", http.StatusServiceUnavailable); body != "not holding\n" {
		t.Fatalf("/leader while waiting = %q", body)
	}
	waitStatus(t, base+"/healthz", http.StatusOK)
	release()
	if code := <-holding; code != ExitOK {
		t.Fatalf("first holder exited %d", code)
	}
	waitStatus(t, base+"/leader", http.StatusOK)
	metrics := waitStatus(t, base+"/metrics", http.StatusOK)
	if want := `baton_lock_acquire_total{name="job",namespace="metrics-lock",result="acquired"} 1`; !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
	}
	cancel()
	if code := <-exited; code != ExitOK {
		t.Fatalf("lock exited %d: %s", code, errOut.String())
	}
}

func TestMetricsListenRefusesATakenPortBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := run(testContext(t), t, "metrics-taken", "--endpoints", "127.0.0.1:1", "lock", "--metrics-listen", ln.Addr().String(), "job")
	if code != ExitError || !strings.Contains(stderr, "--metrics-listen") {
		t.Fatalf("exit %d, stderr %q: want 1 naming --metrics-listen", code, stderr)
	}
	code, _, stderr = run(testContext(t), t, "metrics-taken", "elect", "--metrics-listen", "nonsense", "x", "y")
	if code != ExitUsage || !strings.Contains(stderr, "host:port") {
		t.Fatalf("exit %d, stderr %q: want 64", code, stderr)
	}
}
