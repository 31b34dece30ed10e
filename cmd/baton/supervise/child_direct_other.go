//go:build !linux

package supervise

import (
	"context"
	"os/exec"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// Without Linux's subreaper and parent death signal there is no
// supervisor: the command runs as baton's direct child, is stopped when
// the hold ends or baton is interrupted, but outlives a killed or frozen
// baton, and its own children are not signalled.
const supervised = false

const SuperviseCommand = "__supervise"

func NewCmdSupervise(*cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:    SuperviseCommand,
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return cmdutil.UsageErrorf("%s needs Linux", SuperviseCommand)
		},
	}
}

// WarnUnsupervised tells the operator what is not covered here.
func WarnUnsupervised(warn func(string)) {
	warn("warning: the command is not supervised on this system (Linux only): it is not stopped if baton is killed or frozen, and only the command itself gets signals")
}

// Run starts the command and waits for it to exit. When h ends or ctx
// ends, it gets SIGTERM and, if still running after the grace, SIGKILL.
func (c Child) Run(ctx context.Context, h Hold) (ChildResult, error) {
	cmd := exec.Command(c.Path, c.Argv[1:]...)
	cmd.Args[0] = c.Argv[0]
	cmd.Env = append(cmdutil.ChildEnviron(), c.Env...) // never BATON_PASSWORD
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	// A grandchild that keeps the output pipe open must not hold baton.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		err = startError(c.Argv[0], err)
		return ChildResult{Status: cmdutil.ExitCode(err)}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var res ChildResult
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
			killTimer = time.NewTimer(c.Grace)
			kill = killTimer.C
		}
	}
	for {
		select {
		case err := <-done:
			res.Status = exitStatus(cmd, err)
			return res, nil
		case <-ctxDone:
			ctxDone = nil
			res.interrupted = true
			stop()
		case <-owned:
			owned = nil
			res.Lost = true
			stop()
		case r := <-c.Requests:
			c.Requests, res.Requested = nil, true
			c.OnRequest(r)
			_ = cmd.Process.Signal(c.ReqSignal)
			if killTimer == nil {
				killTimer = time.NewTimer(c.Grace)
				kill = killTimer.C
			}
		case <-kill:
			kill = nil
			res.Killed = true
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus is the child's status as a shell reports it.
func exitStatus(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return cmdutil.ExitError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	if err != nil {
		return cmdutil.ExitError
	}
	return cmdutil.ExitOK
}
