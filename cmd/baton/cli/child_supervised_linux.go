//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// deadlinePoll is how often baton looks for a new validity deadline to
// pass on: well inside the slack between a renewal (every TTL/3) and the
// deadline it replaces (TTL − TTL/5 after the previous one was sent).
const deadlinePoll = 50 * time.Millisecond

// run starts the command under the supervisor and returns once the
// supervisor has exited, which it does only when every process the
// command started is gone. While h is held, each new validity deadline is
// passed on; when h ends or ctx ends, baton asks for a stop.
func (c child) run(ctx context.Context, h hold) (childResult, error) {
	select {
	case <-h.Done():
		return childResult{lost: true}, nil
	default:
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return childResult{}, err
	}
	defer ctlW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		_ = ctlR.Close()
		return childResult{}, err
	}
	defer repR.Close()

	last := h.Deadline()
	args := []string{superviseCommand,
		"--grace", c.grace.String(),
		"--deadline", strconv.FormatInt(monoDeadline(last), 10),
		"--path", c.path, "--"}
	cmd := exec.Command(c.exe, append(args, c.argv...)...)
	cmd.Env = append(childEnviron(), c.env...) // never BATON_PASSWORD
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.ExtraFiles = []*os.File{ctlR, repW}
	// The control pipe's EOF tells the supervisor that baton is gone; the
	// parent death signal is a second witness. A group of its own keeps the
	// supervisor alive when baton's whole group is killed (a shell's
	// kill -9 %1), so that it can stop the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: parentDeath, Setpgid: true}
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	_ = ctlR.Close()
	_ = repW.Close()
	if err != nil {
		return childResult{status: ExitError}, fmt.Errorf("start the supervisor %s: %w", c.exe, err)
	}
	reports := make(chan superviseReport, 1)
	go func() {
		var r superviseReport
		if err := json.NewDecoder(repR).Decode(&r); err != nil {
			r = superviseReport{Status: -1}
		}
		reports <- r
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	tick := time.NewTicker(deadlinePoll)
	defer tick.Stop()
	var res childResult
	owned, ctxDone := h.Done(), ctx.Done()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_, _ = fmt.Fprintln(ctlW, "stop")
		}
	}
	for {
		select {
		case werr := <-done:
			r := <-reports
			if r.Status < 0 {
				// No report: the supervisor itself died.
				return res, fmt.Errorf("the supervisor exited without a report (%v); the command may still run", werr)
			}
			res.status, res.killed = r.Status, r.Killed
			if r.Cause == causeDeadline || r.Cause == causeParent {
				res.cause = r.Cause
			}
			return res, nil
		case <-tick.C:
			if d := h.Deadline(); !stopped && !d.Equal(last) {
				last = d
				_, _ = fmt.Fprintf(ctlW, "deadline %d\n", monoDeadline(d))
			}
		case <-owned:
			owned = nil
			res.lost = true
			stop()
		case <-ctxDone:
			ctxDone = nil
			res.interrupted = true
			stop()
		}
	}
}

// warnUnsupervised says nothing where the supervisor is available.
func warnUnsupervised(func(string)) {}
