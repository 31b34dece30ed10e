package clitest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
	"github.com/batonhq/baton/router"
)

func HttpGet(t *testing.T, url string) (int, string, error) {
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

// WaitStatus polls url until it answers want, for at most 10 s.
func WaitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, err := HttpGet(t, url)
		if err == nil && code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q %v, want %d", url, code, body, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func CandidateKey(ctx context.Context, t *testing.T, e *election.Election, value string) string {
	t.Helper()
	var key string
	WaitFor(t, func() bool {
		cands, err := e.Candidates(ctx)
		for _, c := range cands {
			if err == nil && c.Value == value {
				key = c.Key
			}
		}
		return key != ""
	})
	return key
}

const HeapFileEnv = "BATON_TEST_HEAP_FILE"

// reportHeapOnSignal writes the live heap (after two collections) to path
// on every SIGUSR1: "<count> <bytes>".
func reportHeapOnSignal(path string) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for n := 1; ; n++ {
			<-ch
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			tmp := path + ".tmp"
			_ = os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d", n, ms.HeapAlloc)), 0o600)
			_ = os.Rename(tmp, path)
		}
	}()
}

// WaitFor polls cond, for state that has no event to wait on (another
// process's view of etcd), at most 10 s.
func WaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Golden compares got with testdata/name, or rewrites it with -update.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

var (
	T0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	Now = T0.Add(95 * time.Second)
)

func WritePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteMap writes a cluster map of payments on a and jobs on b.
func WriteMap(t *testing.T, a, b *etcdtest.Server) string {
	t.Helper()
	m := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: b.Endpoints(), Namespaces: []string{"jobs"}},
	}}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// RunEnv runs baton with the given environment and no --namespace.
func RunEnv(ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut SyncBuffer
	io := cmdutil.IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Getenv: func(k string) string { return env[k] }}
	code = Main(ctx, args, io)
	return code, out.String(), errOut.String()
}

// Srv2 is a second cluster for a test.
func Srv2(t *testing.T) *etcdtest.Server { return etcdtest.Start(t, etcdtest.Config{Name: "second"}) }

// StartSecureDev runs `baton dev` with TLS, client-certificate auth and the
// policy given, with certificates for users, and returns how to run baton
// as one of them.
func StartSecureDev(t *testing.T, users, policy string) func(user string, args ...string) (int, string, string) {
	t.Helper()
	ctx := TestContext(t)
	as := StartSecureDevCtx(t, users, policy)
	return func(user string, args ...string) (int, string, string) { return as(ctx, user, args...) }
}

// StartSecureDevCtx is startSecureDev whose commands run with a context of
// the caller's (to stop a long-running one).
func StartSecureDevCtx(t *testing.T, users, policy string) func(ctx context.Context, user string, args ...string) (int, string, string) {
	t.Helper()
	ctx := TestContext(t)
	dir := t.TempDir()
	if code, _, errOut := Run(ctx, t, "", "certs", "init", "--dir", dir, "--users", users); code != cmdutil.ExitOK {
		t.Fatalf("certs init: %s", errOut)
	}
	listen, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	devCtx, stop := context.WithCancel(context.Background())
	var out, errOut SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- RunTo(devCtx, "", &out, &errOut, "dev", "--listen", listen, "--listen-peer", peer, "--tls", dir, "--auth", "--policy", WritePolicy(t, policy))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("dev did not stop")
		}
	})
	WaitFor(t, func() bool {
		select {
		case code := <-done:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "press Ctrl-C")
	})
	return func(ctx context.Context, user string, args ...string) (int, string, string) {
		f := rbac.ClientFiles(dir, user)
		flags := []string{"--endpoints", "https://" + listen, "--cacert", f.CA}
		if user != "" {
			flags = append(flags, "--cert", f.Cert, "--key", f.Key)
		}
		return Run(ctx, t, "", append(flags, args...)...)
	}
}

// LockDelayScene leaves, in namespace ns, a lock-delay of d running on
// lock name: a holder with the delay is lost (its lease revoked) and a
// second contender with the delay sees the loss and waits it out; the
// contender's lock is released when the test ends.
func LockDelayScene(t *testing.T, ns, name string, d time.Duration) {
	t.Helper()
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := Srv.Client(t)
	lost, err := mutex.New(cli, name, mutex.WithNamespace(ns), mutex.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lost.Close() })
	l, err := lost.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, l.Lease()); err != nil {
		t.Fatal(err)
	}
	next, err := mutex.New(cli, name, mutex.WithNamespace(ns), mutex.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; _ = next.Close() })
	go func() {
		defer close(done)
		if nl, err := next.Lock(wctx); err == nil {
			_ = nl.Unlock(context.Background())
		}
	}()
	etcdtest.WaitKeys(t, cli, "/"+ns+"/v1/delay/lock/"+name+"/until/", 1)
}
