//go:build !linux

package cli

import (
	"context"
	"os/exec"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Without Linux's subreaper and parent death signal there is no
// supervisor: the command runs as baton's direct child, is stopped when
// the hold ends or baton is interrupted, but outlives a killed or frozen
// baton, and its own children are not signalled.
const supervised = false

const superviseCommand = "__supervise"

func newSuperviseCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:    superviseCommand,
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return usageErrorf("%s needs Linux", superviseCommand)
		},
	}
}

// warnUnsupervised tells the operator what is not covered here.
func warnUnsupervised(warn func(string)) {
	warn("warning: the command is not supervised on this system (Linux only): it is not stopped if baton is killed or frozen, and only the command itself gets signals")
}

// run starts the command and waits for it to exit. When h ends or ctx
// ends, it gets SIGTERM and, if still running after the grace, SIGKILL.
func (c child) run(ctx context.Context, h hold) (childResult, error) {
	cmd := exec.Command(c.path, c.argv[1:]...)
	cmd.Args[0] = c.argv[0]
	cmd.Env = append(childEnviron(), c.env...) // never BATON_PASSWORD
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	// A grandchild that keeps the output pipe open must not hold baton.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		err = startError(c.argv[0], err)
		return childResult{status: exitCode(err)}, err
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
	owned, ctxDone := h.Done(), ctx.Done()
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
		case <-ctxDone:
			ctxDone = nil
			res.interrupted = true
			stop()
		case <-owned:
			owned = nil
			res.lost = true
			stop()
		case r := <-c.requests:
			c.requests, res.requested = nil, true
			c.onRequest(r)
			_ = cmd.Process.Signal(c.reqSignal)
			if killTimer == nil {
				killTimer = time.NewTimer(c.grace)
				kill = killTimer.C
			}
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
