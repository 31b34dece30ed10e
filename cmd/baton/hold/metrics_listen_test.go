package hold_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

func TestMetricsListenServesElectMetricsHealthAndLeader(t *testing.T) {
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(clitest.TestContext(t))
	defer cancel()
	var out, errOut clitest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- clitest.RunTo(ctx, "metrics-elect", &out, &errOut, "elect", "--metrics-listen", addr, "svc", "host-a")
	}()
	base := "http://" + addr
	clitest.WaitStatus(t, base+"/leader", http.StatusOK)
	if body := clitest.WaitStatus(t, base+"/healthz", http.StatusOK); body != "ok\n" {
		t.Fatalf("/healthz = %q", body)
	}
	metrics := clitest.WaitStatus(t, base+"/metrics", http.StatusOK)
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
		if code != cmdutil.ExitOK {
			t.Fatalf("elect exited %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("elect did not exit")
	}
	if _, _, err := clitest.HttpGet(t, base+"/healthz"); err == nil {
		t.Fatal("the metrics listener outlived the command")
	}
}

func TestMetricsListenLockNotHoldingThenHolding(t *testing.T) {
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "metrics-lock"
	ctx := clitest.TestContext(t)
	hctx, release := context.WithCancel(ctx)
	holding := make(chan int, 1)
	go func() {
		holding <- clitest.RunTo(hctx, ns, &clitest.SyncBuffer{}, &clitest.SyncBuffer{}, "lock", "job")
	}()
	etcdtest.WaitKeys(t, clitest.Srv.Client(t), "/"+ns+"/v1/lock/", 1)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errOut clitest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- clitest.RunTo(wctx, ns, &clitest.SyncBuffer{}, &errOut, "lock", "--metrics-listen", addr, "job")
	}()
	base := "http://" + addr
	if body := clitest.WaitStatus(t, base+"/leader", http.StatusServiceUnavailable); body != "not holding\n" {
		t.Fatalf("/leader while waiting = %q", body)
	}
	clitest.WaitStatus(t, base+"/healthz", http.StatusOK)
	release()
	if code := <-holding; code != cmdutil.ExitOK {
		t.Fatalf("first holder exited %d", code)
	}
	clitest.WaitStatus(t, base+"/leader", http.StatusOK)
	metrics := clitest.WaitStatus(t, base+"/metrics", http.StatusOK)
	if want := `baton_lock_acquire_total{name="job",namespace="metrics-lock",result="acquired"} 1`; !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
	}
	cancel()
	if code := <-exited; code != cmdutil.ExitOK {
		t.Fatalf("lock exited %d: %s", code, errOut.String())
	}
}

func TestMetricsListenRefusesATakenPortBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := clitest.Run(clitest.TestContext(t), t, "metrics-taken", "--endpoints", "127.0.0.1:1", "lock", "--metrics-listen", ln.Addr().String(), "job")
	if code != cmdutil.ExitError || !strings.Contains(stderr, "--metrics-listen") {
		t.Fatalf("exit %d, stderr %q: want 1 naming --metrics-listen", code, stderr)
	}
	code, _, stderr = clitest.Run(clitest.TestContext(t), t, "metrics-taken", "elect", "--metrics-listen", "nonsense", "x", "y")
	if code != cmdutil.ExitUsage || !strings.Contains(stderr, "host:port") {
		t.Fatalf("exit %d, stderr %q: want 64", code, stderr)
	}
}
