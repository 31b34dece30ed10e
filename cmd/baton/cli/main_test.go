package cli

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

	"github.com/batonhq/baton/integration/etcdtest"
)

// srv is the package's embedded etcd, started once by TestMain.
var srv *etcdtest.Server

func TestMain(m *testing.M) {
	// lock and elect re-execute this binary as their command's supervisor.
	if len(os.Args) > 1 && os.Args[1] == superviseCommand {
		os.Exit(Main(context.Background(), os.Args[1:], StdIO()))
	}
	// The UI memory test runs baton in a process of its own, which writes
	// its live heap to this file on SIGUSR1.
	if path := os.Getenv(heapFileEnv); path != "" {
		reportHeapOnSignal(path)
		os.Exit(Main(context.Background(), os.Args[1:], StdIO()))
	}
	before := goleak.IgnoreCurrent()
	var err error
	srv, err = etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(before); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run runs baton in this process against the package's etcd, in the
// namespace given, and returns its exit code and output.
func run(ctx context.Context, t *testing.T, ns string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuffer
	code = runTo(ctx, ns, &out, &errOut, args...)
	return code, out.String(), errOut.String()
}

func runTo(ctx context.Context, ns string, out, errOut *syncBuffer, args ...string) int {
	env := map[string]string{"BATON_ENDPOINTS": srv.Endpoint()}
	io := IO{In: strings.NewReader(""), Out: out, Err: errOut, Getenv: func(k string) string { return env[k] }}
	if ns != "" {
		args = append([]string{"--namespace", ns}, args...)
	}
	return Main(ctx, args, io)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
