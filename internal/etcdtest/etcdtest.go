// Package etcdtest runs a real etcd server process on 127.0.0.1 for the
// library's own tests and examples: a temp data directory, free loopback
// ports, fsync on, ready in about a second. The server is the etcd release
// that internal/embedetcd's module pins, built once with `go build` and
// cached (binary.go), so that the library's module never links etcd's
// server: an application that imports baton gets none of the server's
// dependencies in its module graph. Suites that need an embedded member
// (killed members, partitions inside one process) live in the integration
// module.
//
// It imports testing and is for tests only.
//
//	srv := etcdtest.Start(t)          // stopped by t.Cleanup
//	cli := srv.Client(t)              // closed by t.Cleanup
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/loopback"
)

// Config configures a member. The zero Config is a fresh single member in a
// new temp directory on free loopback ports.
type Config struct {
	// Name is the member's name (default "default").
	Name string
	// ClientAddr is the host:port clients dial (default: a free port), so
	// that a test can start a member where one stood before.
	ClientAddr string
}

// Server is a running etcd server process.
type Server struct {
	cmd      *exec.Cmd
	dir      string
	endpoint string
	exited   chan struct{}
	stderr   *lockedBuffer
	stopOnce sync.Once
}

// Start starts a member for a test and stops it on t.Cleanup.
func Start(tb testing.TB, cfgs ...Config) *Server {
	tb.Helper()
	var cfg Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// New starts a member and waits until it serves. Its passwords are hashed
// at bcrypt's least cost, so that a test's authentications do not outlast a
// dial timeout on a loaded machine running the race detector.
func New(cfg Config) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = "default"
	}
	clientAddr := cfg.ClientAddr
	if clientAddr == "" {
		if clientAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	peerAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	sweep()
	// The directory names its test binary, so that a later one removes it
	// if this one dies before Stop (the member itself dies with it).
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dataPrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	curl, purl := "http://"+clientAddr, "http://"+peerAddr
	cmd := exec.Command(bin,
		"--name", name,
		"--data-dir", dir,
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", name+"="+purl,
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--bcrypt-cost", "4",
		"--log-level", "error",
	)
	s := &Server{cmd: cmd, dir: dir, endpoint: curl, exited: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	if err := s.ready(30 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// dataPrefix begins the name of every member's data directory, followed by
// the pid of the test binary that made it.
const dataPrefix = "baton-etcd-"

// sweep removes the data directories of test binaries that are gone.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dataPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), dataPrefix)
		pid, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// ready waits until the member answers a linearizable read.
func (s *Server) ready(timeout time.Duration) error {
	cli, err := s.NewClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("etcd exited before serving: %s", strings.TrimSpace(s.stderr.String()))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd not ready in %v: %v; stderr: %s", timeout, err, strings.TrimSpace(s.stderr.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Endpoint is the member's client URL.
func (s *Server) Endpoint() string { return s.endpoint }

// Endpoints is Endpoint as a list, for clientv3.Config.
func (s *Server) Endpoints() []string { return []string{s.endpoint} }

// NewClient dials endpoints (default: the member's).
func (s *Server) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = s.Endpoints()
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Stop terminates the member (SIGTERM, SIGKILL after 10 s), waits for it to
// exit and removes its data. It is idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		_ = os.RemoveAll(s.dir)
	})
}

// FreeAddr returns a 127.0.0.1 host:port that was free a moment ago
// (loopback.FreeAddr).
func FreeAddr() (string, error) { return loopback.FreeAddr() }

// lockedBuffer collects the process's output for error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<16 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
