package clitest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// Srv is the test package's embedded etcd, started once by RunTests.
var Srv *etcdtest.Server

// mainFn is baton's entry point (cli.Main), given to RunTests: the rooms'
// tests cannot import the root that imports them.
var mainFn func(context.Context, []string, cmdutil.IO) int

// Main runs baton's entry point as given to RunTests.
func Main(ctx context.Context, args []string, io cmdutil.IO) int { return mainFn(ctx, args, io) }

// RunTests is a test package's TestMain: the supervisor and UI-heap
// re-executions of the test binary, then the tests against one embedded
// etcd, then a goroutine leak check.
func RunTests(m *testing.M, main func(context.Context, []string, cmdutil.IO) int) {
	mainFn = main
	// lock and elect re-execute this binary as their command's supervisor.
	if len(os.Args) > 1 && os.Args[1] == supervise.SuperviseCommand {
		os.Exit(Main(context.Background(), os.Args[1:], cmdutil.StdIO()))
	}
	// The UI memory test runs baton in a process of its own, which writes
	// its live heap to this file on SIGUSR1.
	if path := os.Getenv(HeapFileEnv); path != "" {
		reportHeapOnSignal(path)
		os.Exit(Main(context.Background(), os.Args[1:], cmdutil.StdIO()))
	}
	before := goleak.IgnoreCurrent()
	var err error
	Srv, err = etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	Srv.Stop()
	if code == 0 {
		if err := goleak.Find(before); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// SyncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Run runs baton in this process against the package's etcd, in the
// namespace given, and returns its exit code and output.
func Run(ctx context.Context, t *testing.T, ns string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut SyncBuffer
	code = RunTo(ctx, ns, &out, &errOut, args...)
	return code, out.String(), errOut.String()
}

func RunTo(ctx context.Context, ns string, out, errOut *SyncBuffer, args ...string) int {
	env := map[string]string{"BATON_ENDPOINTS": Srv.Endpoint()}
	io := cmdutil.IO{In: strings.NewReader(""), Out: out, Err: errOut, Getenv: func(k string) string { return env[k] }}
	if ns != "" {
		args = append([]string{"--namespace", ns}, args...)
	}
	return Main(ctx, args, io)
}

func TestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
