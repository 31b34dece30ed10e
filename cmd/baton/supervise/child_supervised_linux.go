//go:build linux

package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// deadlinePoll is how often baton looks for a new validity deadline to
// pass on: well inside the slack between a renewal (every TTL/3) and the
// deadline it replaces (TTL − TTL/5 after the previous one was sent).
const deadlinePoll = 50 * time.Millisecond

// Run starts the command under the supervisor and returns once the
// supervisor has exited, which it does only when every process the
// command started is gone. While h is held, each new validity deadline is
// passed on; when h ends or ctx ends, baton asks for a stop.
func (c Child) Run(ctx context.Context, h Hold) (ChildResult, error) {
	select {
	case <-h.Done():
		return ChildResult{Lost: true}, nil
	default:
	}
	adoptOrphans()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return ChildResult{}, err
	}
	defer ctlW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		_ = ctlR.Close()
		return ChildResult{}, err
	}
	defer repR.Close()

	last := h.Deadline()
	args := []string{SuperviseCommand,
		"--grace", c.Grace.String(),
		"--deadline", strconv.FormatInt(monoDeadline(last), 10),
		"--path", c.Path, "--"}
	cmd := exec.Command(c.Exe, append(args, c.Argv...)...)
	cmd.Env = append(cmdutil.ChildEnviron(), c.Env...) // never BATON_PASSWORD
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
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
		return ChildResult{Status: cmdutil.ExitError}, fmt.Errorf("start the supervisor %s: %w", c.Exe, err)
	}
	reports := make(chan superviseReport, 1)
	var group atomic.Int64 // the command's process group, once it runs
	go func() {
		dec := json.NewDecoder(repR)
		for {
			var r superviseReport
			if err := dec.Decode(&r); err != nil {
				r = superviseReport{Status: -1}
			} else if r.Started > 0 {
				group.Store(int64(r.Started))
				continue
			}
			reports <- r
			return
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	tick := time.NewTicker(deadlinePoll)
	defer tick.Stop()
	var res ChildResult
	owned, ctxDone := h.Done(), ctx.Done()
	stopped := false
	// A supervisor that has not ended the command by the grace after a
	// stop (frozen, wedged) is killed, and its command's group with it.
	var unresponsive <-chan time.Time
	stop := func() {
		if !stopped {
			stopped = true
			_ = writeControl(ctlW, "stop")
			unresponsive = time.After(c.Grace + supervisorSlack)
		}
	}
	for {
		select {
		case werr := <-done:
			r := <-reports
			if r.Status < 0 {
				// No report: the supervisor itself died; what it started
				// must not outlive it, nor run once the hold is released.
				if pgid := int(group.Load()); pgid > 0 && killOrphans(pgid) {
					return res, fmt.Errorf("the supervisor exited without a report (%v); its command's process group %d was killed", werr, pgid)
				}
				return res, fmt.Errorf("the supervisor exited without a report (%v); the command may still run", werr)
			}
			res.Status, res.Killed = r.Status, r.Killed
			if r.Cause == CauseDeadline || r.Cause == causeParent {
				res.Cause = r.Cause
			}
			return res, nil
		case <-tick.C:
			if d := h.Deadline(); !stopped && !d.Equal(last) && writeControl(ctlW, fmt.Sprintf("deadline %d", monoDeadline(d))) == nil {
				last = d
			}
		case <-unresponsive:
			unresponsive = nil
			_ = cmd.Process.Kill()
		case <-owned:
			owned = nil
			res.Lost = true
			stop()
		case <-ctxDone:
			ctxDone = nil
			res.interrupted = true
			stop()
		case r := <-c.Requests:
			c.Requests = nil
			if !stopped {
				stopped, res.Requested = true, true
				c.OnRequest(r)
				_ = writeControl(ctlW, fmt.Sprintf("stop %d", c.ReqSignal))
				unresponsive = time.After(c.Grace + supervisorSlack)
			}
		}
	}
}

// supervisorSlack is how long after the grace baton waits for the
// supervisor to end a stop before killing it.
const supervisorSlack = 2 * time.Second

// controlWriteTimeout bounds a write to the control pipe: a frozen
// supervisor that no longer reads it must not freeze baton.
const controlWriteTimeout = 100 * time.Millisecond

// writeControl writes one line to the control pipe, or nothing if the
// pipe stays full (a line is shorter than PIPE_BUF: written whole or not
// at all).
func writeControl(w *os.File, line string) error {
	_ = w.SetWriteDeadline(time.Now().Add(controlWriteTimeout)) // a pipe of os.Pipe has deadlines
	_, err := w.WriteString(line + "\n")
	return err
}

// killOrphans runs once the supervisor died: baton, a subreaper, has
// adopted what the supervisor had started (it has no other child then).
// It SIGKILLs process group pgid and every child it adopted, reaps them,
// and reports whether the group is gone within a few seconds.
func killOrphans(pgid int) bool {
	self := os.Getpid()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		groupGone := errors.Is(syscall.Kill(-pgid, syscall.SIGKILL), syscall.ESRCH)
		for _, pid := range children(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
		}
		if groupGone || time.Now().After(deadline) {
			return groupGone
		}
	}
}

// adoptOrphans makes baton the subreaper of what its supervisor starts, so
// that if the supervisor dies its command is adopted by baton, which kills
// it, instead of by init.
func adoptOrphans() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// WarnUnsupervised says nothing where the supervisor is available.
func WarnUnsupervised(func(string)) {}
