package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Exit statuses of a command that could not be run, as shells have them.
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// child is a command run under a lock or as leader.
type child struct {
	argv   []string
	env    []string // added to baton's own environment
	grace  time.Duration
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// childResult is how a child ended.
type childResult struct {
	// status is the child's exit status; 128+N when signal N killed it.
	status int
	// lost: ownership ended while the child ran, and it was stopped.
	lost bool
	// killed: it outlived the grace after SIGTERM and got SIGKILL.
	killed bool
	// interrupted: baton forwarded a SIGINT or SIGTERM (or its own
	// context ended) before the child exited.
	interrupted bool
}

// run starts the child and waits for it to exit. Every signal from sigs is
// forwarded to it. When owned closes, it gets SIGTERM and, if still
// running after the grace, SIGKILL; the same when ctx ends. The child is
// not left running on any path.
func (c child) run(ctx context.Context, owned <-chan struct{}, sigs <-chan os.Signal) (childResult, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(childEnviron(), c.env...) // never BATON_PASSWORD
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	// A grandchild that keeps the output pipe open must not hold baton.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		code := exitNotExecutable
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return childResult{status: code}, withCode(code, fmt.Errorf("start %s: %w", c.argv[0], err))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var res childResult
	var kill <-chan time.Time
	var killTimer *time.Timer
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	ctxDone := ctx.Done()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if killTimer == nil {
			killTimer = time.NewTimer(c.grace)
			kill = killTimer.C
		}
	}
	for {
		select {
		case err := <-done:
			res.status = exitStatus(cmd, err)
			return res, nil
		case s := <-sigs:
			res.interrupted = true
			_ = cmd.Process.Signal(s)
		case <-ctxDone:
			ctxDone = nil
			res.interrupted = true
			stop()
		case <-owned:
			owned = nil
			res.lost = true
			stop()
		case <-kill:
			kill = nil
			res.killed = true
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus is the child's status as a shell reports it.
func exitStatus(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return ExitError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	if err != nil {
		return ExitError
	}
	return ExitOK
}
