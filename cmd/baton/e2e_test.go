package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// The end-to-end tests build the baton binary once and run it as a user
// would, against one embedded etcd.
var (
	binary string
	srv    *etcdtest.Server
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "baton-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "baton")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build baton:", err)
		return 1
	}
	srv, err = etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Stop()
	return m.Run()
}

// proc is a running baton.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startOn(t, srv.Endpoint(), args...)
}

// startOn starts baton against the given endpoints (comma-separated).
func startOn(t *testing.T, endpoints string, args ...string) *proc {
	t.Helper()
	return startWith(t, endpoints, nil, args...)
}

// startWith starts baton with the given process attributes.
func startWith(t *testing.T, endpoints string, attr *syscall.SysProcAttr, args ...string) *proc {
	t.Helper()
	return launch(t, launchConfig{endpoints: endpoints, attr: attr}, args...)
}

// launchConfig is how launch starts baton.
type launchConfig struct {
	endpoints string
	attr      *syscall.SysProcAttr
	env       []string  // added to the environment
	stdin     io.Reader // nil: none
}

// launch starts baton; lines of its stdout and stderr reach waitLine.
func launch(t *testing.T, c launchConfig, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 256), done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.SysProcAttr = c.attr
	p.cmd.Env = append(append(os.Environ(), "BATON_ENDPOINTS="+c.endpoints), c.env...)
	p.cmd.Stdin = c.stdin
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Lines of both streams (status lines are on stderr) reach waitLine.
	var scanners sync.WaitGroup
	scan := func(r io.Reader, b *bytes.Buffer) {
		defer scanners.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			b.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}
	scanners.Add(2)
	go scan(out, &p.stdout)
	go scan(errOut, &p.stderr)
	go func() {
		scanners.Wait()
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code < 0 {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine waits for a line of stdout or stderr containing s.
func (p *proc) waitLine(s string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return l
			}
		case <-p.done:
			for _, l := range strings.Split(p.out()+p.errOut(), "\n") {
				if strings.Contains(l, s) {
					return l // printed, but the exit won the race
				}
			}
			p.t.Fatalf("%v exited (%d) before printing %q\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.code, s, p.out(), p.errOut())
		case <-deadline.C:
			p.t.Fatalf("%v did not print %q within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], s, timeout, p.out(), p.errOut())
		}
	}
}

// wait waits for the exit and returns the code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%v still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], timeout, p.out(), p.errOut())
		return -1
	}
}

func (p *proc) out() string    { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.String() }
func (p *proc) errOut() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

func runBaton(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, args...)
	code := p.wait(timeout)
	return code, p.out(), p.errOut()
}

func client(t *testing.T) *clientv3.Client { return srv.Client(t) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// holderLease finds the lease of the only contender under prefix.
func holderLease(t *testing.T, prefix string) clientv3.LeaseID {
	t.Helper()
	resp, err := client(t).Get(ctxT(t), prefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v, %d keys", prefix, err, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func TestLockStopsCommandWhenLockIsRevoked(t *testing.T) {
	cases := []struct {
		name   string
		script string
		killed bool
	}{
		{"command stops on SIGTERM", `trap 'echo got TERM; exit 3' TERM; echo started; while :; do sleep 0.05; done`, false},
		{"command ignoring SIGTERM gets SIGKILL", `trap '' TERM; echo started; while :; do sleep 0.05; done`, true},
	}
	const grace = 1500 * time.Millisecond
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("revoked-%d", i)
			p := start(t, "lock", name, "--ttl", "10s", "--grace", grace.String(), "--", "sh", "-c", c.script)
			p.waitLine("started", 15*time.Second)
			lease := holderLease(t, "/baton/v1/lock/"+name+"/")
			revoked := time.Now()
			if _, err := client(t).Revoke(ctxT(t), lease); err != nil {
				t.Fatal(err)
			}
			code := p.wait(grace + 5*time.Second)
			took := time.Since(revoked)
			if code != cli.ExitOwnershipLost {
				t.Errorf("exit %d, want %d (ownership lost); stderr:\n%s", code, cli.ExitOwnershipLost, p.errOut())
			}
			if c.killed {
				if took < grace || !strings.Contains(p.errOut(), "SIGKILL") {
					t.Errorf("stopped after %v, want SIGKILL after the %v grace; stderr:\n%s", took, grace, p.errOut())
				}
			} else {
				if took >= grace || !strings.Contains(p.out(), "got TERM") {
					t.Errorf("stopped after %v, want SIGTERM within the %v grace; stdout:\n%s", took, grace, p.out())
				}
			}
		})
	}
}

func TestLockPassesEnvironmentAndStatus(t *testing.T) {
	code, out, errOut := runBaton(t, 15*time.Second, "lock", "status", "--",
		"sh", "-c", `echo "$BATON_LOCK_NAME|$BATON_FENCING_TOKEN|$BATON_LOCK_KEY"; exit 7`)
	if code != 7 {
		t.Errorf("exit %d, want the command's 7; stderr:\n%s", code, errOut)
	}
	parts := strings.Split(strings.TrimSpace(out), "|")
	if len(parts) != 3 || parts[0] != "status" || parts[1] == "" || parts[1] == "0" ||
		!strings.HasPrefix(parts[2], "/baton/v1/lock/status/") {
		t.Errorf("command saw %q, want name|token|key", out)
	}
	code, _, _ = runBaton(t, 15*time.Second, "lock", "status", "--", "sh", "-c", "kill -KILL $$")
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("command killed by SIGKILL: exit %d, want %d", code, 128+int(syscall.SIGKILL))
	}
	code, _, _ = runBaton(t, 15*time.Second, "lock", "status", "--", "/nonexistent/cmd")
	if code != 127 {
		t.Errorf("missing command: exit %d, want 127", code)
	}
	// The lock was released each time.
	resp, err := client(t).Get(ctxT(t), "/baton/v1/lock/status/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("lock keys left: %v %v", resp, err)
	}
}

func TestTryOnHeldLockIsNotAcquired(t *testing.T) {
	m, err := mutex.New(client(t), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runBaton(t, 15*time.Second, "lock", "held", "--try", "--", "true")
	if code != cli.ExitNotAcquired {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, cli.ExitNotAcquired, errOut)
	}
}

func TestForceUnlockRefusesLiveHolderThenRevokesDeadOne(t *testing.T) {
	holder := start(t, "lock", "victim", "--ttl", "6s")
	holder.waitLine("holding lock", 15*time.Second)

	code, out, errOut := runBaton(t, 20*time.Second, "unlock", "victim", "--force", "--reason", "e2e: alive")
	if code != cli.ExitRefused || !strings.Contains(out, "RENEWED") {
		t.Fatalf("unlock of a live holder: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, cli.ExitRefused, out, errOut)
	}

	// The holder dies without releasing: its lease lives on until its TTL.
	_ = holder.cmd.Process.Kill()
	holder.wait(5 * time.Second)
	code, out, errOut = runBaton(t, 20*time.Second, "unlock", "victim", "--force", "--reason", "e2e: holder killed")
	if code != cli.ExitOK || !strings.Contains(out, "NOT renewed") || !strings.Contains(out, "deleted key") {
		t.Fatalf("unlock of a dead holder: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	resp, err := client(t).Get(ctxT(t), "/baton/v1/lock/victim/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("lock still held after unlock: %v %v", resp.Count, err)
	}

	code, out, _ = runBaton(t, 10*time.Second, "audit", "-o", "json")
	var audit struct {
		Records []map[string]any `json:"records"`
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &audit) != nil {
		t.Fatalf("audit: exit %d\n%s", code, out)
	}
	if len(audit.Records) != 1 {
		t.Fatalf("audit records %v, want exactly the one forced unlock", audit.Records)
	}
	r := audit.Records[0]
	if r["name"] != "victim" || r["reason"] != "e2e: holder killed" || r["result"] != "deleted" ||
		r["renewed"] != false || r["host"] == "" || r["token"] == nil {
		t.Errorf("audit record %v", r)
	}
}

func TestElectHandsOverWhenLeaderIsInterrupted(t *testing.T) {
	a := start(t, "elect", "e2e", "a", "--ttl", "10s")
	a.waitLine(`leading election "e2e" as "a"`, 15*time.Second)
	b := start(t, "elect", "e2e", "b", "--ttl", "10s")
	// b is queued once its key is there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client(t).Get(ctxT(t), "/baton/v1/election/e2e/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b did not queue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	interrupted := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	b.waitLine(`leading election "e2e" as "b"`, 5*time.Second)
	if took := time.Since(interrupted); took > 3*time.Second {
		t.Errorf("handover took %v: a should resign, not let its 10s lease expire", took)
	}
	if code := a.wait(5 * time.Second); code != cli.ExitOK {
		t.Errorf("interrupted leader exit %d, want 0; stderr:\n%s", code, a.errOut())
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(5 * time.Second); code != cli.ExitOK {
		t.Errorf("b exit %d", code)
	}
}

// baton resign --to asks a leading baton elect process, under the default
// strategy, to hand over past the next candidate: c leads, b (next in
// line) never does meanwhile, a queues again.
func TestResignToHandsOverPastTheNextCandidate(t *testing.T) {
	a := start(t, "elect", "e2e-to", "a", "--ttl", "10s")
	a.waitLine(`leading election "e2e-to" as "a"`, 15*time.Second)
	b := start(t, "elect", "e2e-to", "b", "--ttl", "10s")
	waitCount(t, "/baton/v1/election/e2e-to/", 2)
	c := start(t, "elect", "e2e-to", "c", "--ttl", "10s")
	waitCount(t, "/baton/v1/election/e2e-to/", 3)
	code, out, errOut := runBaton(t, 20*time.Second, "resign", "e2e-to", "--to", "c", "--deadline", "10s")
	if code != cli.ExitOK || !strings.Contains(out, "c leads") {
		t.Fatalf("resign --to c: exit %d\nstdout:\n%s\nstderr:\n%s\na said:\n%s", code, out, errOut, a.errOut())
	}
	c.waitLine(`leading election "e2e-to" as "c"`, 5*time.Second)
	waitCount(t, "/baton/v1/election/e2e-to/", 3) // a campaigns again
	if s := b.errOut(); strings.Contains(s, "leading election") {
		t.Fatalf("b led:\n%s", s)
	}
	for _, p := range []*proc{a, b, c} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range []*proc{a, b, c} {
		p.wait(10 * time.Second)
	}
}

// waitCount waits until n keys are under prefix.
func waitCount(t *testing.T, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client(t).Get(ctxT(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v keys, want %d (%v)", prefix, resp, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDemoPasses(t *testing.T) {
	started := time.Now()
	code, out, errOut := runBaton(t, 40*time.Second, "demo")
	if code != cli.ExitOK {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"SIGSTOP", "SIGCONT", "REJECTED", "All invariants hold"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("demo output shows a failure:\n%s", out)
	}
	if took := time.Since(started); took > 30*time.Second {
		t.Errorf("demo took %v, want under 30s", took)
	}
}
