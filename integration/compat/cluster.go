package compat

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// Options shape a cluster.
type Options struct {
	// Flags are added to every member's command line, e.g. the
	// certificate flags of docs/security.md.
	Flags []string
	// TLS makes client and peer URLs https; ClientTLS is then the
	// harness's own client configuration (a root certificate).
	TLS       bool
	ClientTLS *tls.Config
}

// Cluster is a 3-member etcd cluster of real server processes on
// 127.0.0.1. Close (also run at the test's end) kills every member.
type Cluster struct {
	tb      testing.TB
	bin     Binaries
	opts    Options
	members []*Member
}

// Member is one etcd server process.
type Member struct {
	c          *Cluster
	name       string
	clientAddr string
	peerAddr   string
	dir        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// freeAddr picks the members' addresses; a test replaces it.
var freeAddr = etcdtest.FreeAddr

// Start starts a 3-member cluster of bin's etcd and waits until it has a
// leader and answers a linearizable read.
func Start(tb testing.TB, bin Binaries, opts Options) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, bin: bin, opts: opts}
	root := tb.TempDir()
	var initial []string
	for i := range 3 {
		m := &Member{c: c, name: fmt.Sprintf("m%d", i+1), dir: filepath.Join(root, fmt.Sprintf("m%d", i+1))}
		var err error
		if m.clientAddr, err = freeAddr(); err != nil {
			tb.Fatal(err)
		}
		if m.peerAddr, err = freeAddr(); err != nil {
			tb.Fatal(err)
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+c.scheme()+"://"+m.peerAddr)
	}
	tb.Cleanup(c.Close)
	for _, m := range c.members {
		if err := m.start(strings.Join(initial, ",")); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		tb.Fatalf("etcd %s cluster not ready: %v", bin.Minor, err)
	}
	// WaitReady passes over a member that is down, as a restart needs; a
	// new cluster has all three or the test would run on two unawares.
	for _, m := range c.members {
		if !m.Running() {
			tb.Fatalf("etcd %s member %s exited while the cluster started; its log:\n%s", bin.Minor, m.name, tail(m.logPath(), 25))
		}
	}
	return c
}

func (c *Cluster) scheme() string {
	if c.opts.TLS {
		return "https"
	}
	return "http"
}

// Members returns the members in start order.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Endpoints lists every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.Endpoint())
	}
	return eps
}

// NewClient connects to endpoints (default: every member) with the
// cluster's ClientTLS.
func (c *Cluster) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return embedetcd.Dial(endpoints, c.opts.ClientTLS)
}

// Client is NewClient, closed at the test's end.
func (c *Cluster) Client(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	cli, err := c.NewClient(endpoints...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// WaitReady waits until a running member is leader and a linearizable
// read through every running member succeeds.
func (c *Cluster) WaitReady(ctx context.Context) error {
	if _, err := c.WaitLeader(ctx); err != nil {
		return err
	}
	for _, m := range c.members {
		if !m.Running() {
			continue
		}
		if err := m.waitRead(ctx); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

func (m *Member) waitRead(ctx context.Context) error {
	cli, err := m.c.NewClient(m.Endpoint())
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "compat-ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no linearizable read: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader returns the member that is raft leader now, as the running
// members report it.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for _, m := range c.members {
		if !m.Running() {
			continue
		}
		st, err := m.status(ctx)
		if err != nil {
			continue
		}
		if st.Leader == 0 {
			continue
		}
		if st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, errors.New("no member reports itself leader")
}

// WaitLeader waits for Leader to find one.
func (c *Cluster) WaitLeader(ctx context.Context) (*Member, error) {
	for {
		m, err := c.Leader(ctx)
		if err == nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *Member) status(ctx context.Context) (*clientv3.StatusResponse, error) {
	cli, err := m.c.NewClient(m.Endpoint())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cli.Status(sctx, m.Endpoint())
}

// Close kills every member; on a failed test it logs the end of each
// member's log first.
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.Kill()
	}
	if c.tb.Failed() {
		for _, m := range c.members {
			c.tb.Logf("last lines of %s's log (etcd %s):\n%s", m.name, c.bin.Minor, tail(m.logPath(), 25))
		}
	}
}

// Name is the member's name, m1 to m3.
func (m *Member) Name() string { return m.name }

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return m.c.scheme() + "://" + m.clientAddr }

// Running reports whether the process is alive.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (m *Member) logPath() string { return m.dir + ".log" }

func (m *Member) start(initialCluster string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.c.scheme()
	args := []string{
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", s + "://" + m.clientAddr,
		"--advertise-client-urls", s + "://" + m.clientAddr,
		"--listen-peer-urls", s + "://" + m.peerAddr,
		"--initial-advertise-peer-urls", s + "://" + m.peerAddr,
		"--initial-cluster", initialCluster,
		"--initial-cluster-token", "baton-compat",
		"--initial-cluster-state", "new",
		"--logger", "zap",
		"--log-level", "warn",
	}
	args = append(args, m.c.opts.Flags...)
	logf, err := os.OpenFile(m.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.c.bin.Etcd, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: the test's signals never reach it, and
	// Kill takes anything it started with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start etcd %s member %s: %w", m.c.bin.Minor, m.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// Kill sends SIGKILL to the member's process group and waits for the
// process to exit. Its data stays: Restart brings it back.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Restart starts a killed member again on its data directory.
func (m *Member) Restart() error {
	if m.Running() {
		return fmt.Errorf("member %s is running", m.name)
	}
	var initial []string
	for _, o := range m.c.members {
		initial = append(initial, o.name+"="+m.c.scheme()+"://"+o.peerAddr)
	}
	return m.start(strings.Join(initial, ","))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// Addr is the member's client host:port, e.g. for a netproxy in front of it.
func (m *Member) Addr() string { return m.clientAddr }
