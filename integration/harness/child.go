package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Executable is this program's executable, empty if unknown: the default
// binary of the phases whose children run "<Binary> child ROLE ...".
func Executable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// CheckBinary checks the Binary field of a phase that runs children.
func CheckBinary(phase, bin string) error {
	if bin == "" {
		return fmt.Errorf("%s: Binary must name the executable to run as <Binary> child", phase)
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%s: Binary %q: %w", phase, bin, err)
	}
	return nil
}

// Child is one child process of a phase, "<binary> child ROLE args...":
// on one core, told to stop with SIGTERM when its context ends and killed
// waitDelay later, the end of its stderr kept for the report. Set Stdout
// (or take StdoutPipe, StdinPipe) before Start.
type Child struct {
	*exec.Cmd
	stderr Tail
}

// NewChild prepares the child; it is started by Start.
func NewChild(ctx context.Context, binary, role string, waitDelay time.Duration, args ...string) *Child {
	c := &Child{}
	c.Cmd = exec.CommandContext(ctx, binary, append([]string{"child", role}, args...)...)
	c.Cmd.Stderr = &c.stderr
	// One core each: a child's garbage collector that takes every idle
	// core while it marks its heap would stall the member, as processes
	// on machines of their own would not.
	c.Cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	c.Cmd.Cancel = func() error { return c.Cmd.Process.Signal(syscall.SIGTERM) }
	c.Cmd.WaitDelay = waitDelay
	return c
}

// Stderr is the last 4 KiB the child wrote on stderr, trimmed.
func (c *Child) Stderr() string { return strings.TrimSpace(c.stderr.String()) }

// MaxRSS is the child's peak resident memory, once it was waited for.
func (c *Child) MaxRSS() int64 {
	if c.ProcessState == nil {
		return 0
	}
	if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) << 10
	}
	return 0
}

// Tail keeps the last 4 KiB written to it.
type Tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = append(t.b[:0], t.b[len(t.b)-4096:]...)
	}
	return len(p), nil
}

func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
