package compat_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/compat"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// ctlProc is a running etcdctl whose output lines arrive on lines.
type ctlProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

// startCtl runs etcdctl against the cluster with args; it is killed at the
// test's end.
func startCtl(t *testing.T, b compat.Binaries, c *compat.Cluster, args ...string) *ctlProc {
	t.Helper()
	cmd := exec.Command(b.Etcdctl, append([]string{"--endpoints", strings.Join(c.Endpoints(), ",")}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ctlProc{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("etcdctl %v stderr:\n%s", args, stderr.String())
		}
	})
	return p
}

// waitLine waits for a line satisfying ok.
func (p *ctlProc) waitLine(t *testing.T, d time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if ok(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("etcdctl: %s not printed within %v", what, d)
		}
	}
}

// stop sends SIGTERM, on which etcdctl releases what it holds and exits.
func (p *ctlProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("etcdctl did not exit within 10s of SIGTERM")
	}
}

// etcdctlLock contends with `etcdctl lock` on baton's prefix both ways.
func etcdctlLock(t *testing.T, b compat.Binaries, c *compat.Cluster) {
	cli := c.Client(t)
	m, err := mutex.New(cli, "interop", mutex.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ctx := ctxFor(t, 60*time.Second)
	prefix := strings.TrimSuffix(m.Prefix(), "/")

	// baton holds, etcdctl waits.
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctl := startCtl(t, b, c, "lock", prefix)
	etcdtest.WaitKeys(t, cli, m.Prefix(), 2)
	select {
	case l := <-ctl.lines:
		t.Fatalf("etcdctl acquired (%q) while baton held the lock", l)
	default:
	}
	released := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ctlKey := ctl.waitLine(t, 10*time.Second, "the lock key", func(l string) bool { return strings.HasPrefix(l, m.Prefix()) })
	toCtl := time.Since(released)
	resp, err := cli.Get(ctx, ctlKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcdctl's key %q: %v %v", ctlKey, resp, err)
	}
	ctlRev := resp.Kvs[0].CreateRevision
	if ctlRev <= int64(held.Token()) {
		t.Errorf("etcdctl's key revision %d not above baton's token %d", ctlRev, held.Token())
	}
	h, err := m.Holder(ctx)
	if err != nil || h.Key != ctlKey {
		t.Errorf("Holder = %+v, %v; want etcdctl's key %s", h, err, ctlKey)
	}

	// etcdctl holds, baton waits.
	got := make(chan acquisition, 1)
	go func() {
		l, err := m.Lock(ctx)
		got <- acquisition{lock: l, at: time.Now(), err: err}
	}()
	etcdtest.WaitKeys(t, cli, m.Prefix(), 2)
	select {
	case a := <-got:
		t.Fatalf("baton acquired (err %v) while etcdctl held the lock", a.err)
	case <-time.After(300 * time.Millisecond):
	}
	stopped := time.Now()
	ctl.stop(t)
	var a acquisition
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("baton not served within 10s of etcdctl's release")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if int64(a.lock.Token()) <= ctlRev {
		t.Errorf("baton's token %d not above etcdctl's %d", a.lock.Token(), ctlRev)
	}
	if err := a.lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	figure(t, b.Minor, "baton -> etcdctl lock handover %s; etcdctl (SIGTERM) -> baton %s", ms(toCtl), ms(a.at.Sub(stopped)))
}

// etcdctlElect campaigns against `etcdctl elect` both ways and watches with
// `etcdctl elect -l` and Observe.
func etcdctlElect(t *testing.T, b compat.Binaries, c *compat.Cluster) {
	cli := c.Client(t)
	e, err := election.New(cli, "interop", election.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx := ctxFor(t, 60*time.Second)
	prefix := strings.TrimSuffix(e.Prefix(), "/")

	term, err := e.Campaign(ctx, "baton-1")
	if err != nil {
		t.Fatal(err)
	}
	listener := startCtl(t, b, c, "elect", "-l", prefix)
	listener.waitLine(t, 10*time.Second, "baton-1 as leader", func(l string) bool { return l == "baton-1" })

	ctl := startCtl(t, b, c, "elect", prefix, "ctl-1")
	etcdtest.WaitKeys(t, cli, e.Prefix(), 2)
	select {
	case l := <-ctl.lines:
		t.Fatalf("etcdctl elect led (%q) while baton led", l)
	default:
	}
	resigned := time.Now()
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ctl.waitLine(t, 10*time.Second, "ctl-1 leading", func(l string) bool { return l == "ctl-1" })
	toCtl := time.Since(resigned)
	listener.waitLine(t, 10*time.Second, "ctl-1 as leader", func(l string) bool { return l == "ctl-1" })
	l, err := e.Leader(ctx)
	if err != nil || l.Value != "ctl-1" || l.Token <= term.Token() {
		t.Fatalf("Leader = %+v, %v; want ctl-1 with a token above %d", l, err, term.Token())
	}
	ctlToken := l.Token

	got := make(chan *election.Term, 1)
	errs := make(chan error, 1)
	go func() {
		tm, err := e.Campaign(ctx, "baton-2")
		if err != nil {
			errs <- err
			return
		}
		got <- tm
	}()
	etcdtest.WaitKeys(t, cli, e.Prefix(), 2)
	stopped := time.Now()
	ctl.stop(t)
	var t2 *election.Term
	select {
	case t2 = <-got:
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("baton did not lead within 10s of etcdctl's resignation")
	}
	back := time.Since(stopped)
	if t2.Token() <= ctlToken {
		t.Errorf("baton's token %d not above etcdctl's %d", t2.Token(), ctlToken)
	}
	listener.waitLine(t, 10*time.Second, "baton-2 as leader", func(l string) bool { return l == "baton-2" })
	if err := t2.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	figure(t, b.Minor, "baton -> etcdctl elect handover %s; etcdctl (SIGTERM) -> baton %s; etcdctl elect -l saw both", ms(toCtl), ms(back))
}
