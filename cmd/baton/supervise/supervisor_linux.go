//go:build linux

package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// The supervisor is baton re-executed as a hidden subcommand between baton
// and the command, in the manner of tini. It puts the command in a process
// group of its own, becomes the subreaper of everything the command starts,
// and stops all of it (SIGTERM, then SIGKILL after the grace) when baton
// says so, when baton dies (the control pipe reaches EOF, or the parent
// death signal arrives), or when the validity deadline baton last sent
// passes without an extension: a frozen baton cannot keep the command
// running past its lock.
//
// Protocol: on fd 3 baton writes lines "deadline NS" (an absolute
// CLOCK_MONOTONIC time, shared by every process of the machine, so a
// message delayed in the pipe cannot extend too far) and "stop". On fd 4
// the supervisor writes a JSON superviseReport with Started, the command's
// pid (its process group), once it runs, and a final one when everything
// it started is gone, then exits with the command's status.
const SuperviseCommand = "__supervise"

// supervised: the command runs under the supervisor on this system.
const supervised = true

// Pipe descriptors of the supervisor, and its parent death signal.
const (
	controlFD   = 3
	reportFD    = 4
	parentDeath = syscall.SIGUSR2
)

type superviseReport struct {
	// Started, in the first report only, is the command's pid and process
	// group: baton kills that group if the supervisor dies.
	Started int    `json:"started,omitempty"`
	Status  int    `json:"status"`
	Cause   string `json:"cause,omitempty"`
	Killed  bool   `json:"killed,omitempty"`
	Error   string `json:"error,omitempty"`
}

type superviseOptions struct {
	grace    time.Duration
	deadline int64
	path     string
}

func NewCmdSupervise(*cmdutil.Env) *cobra.Command {
	var o superviseOptions
	cmd := &cobra.Command{
		Use:    SuperviseCommand + " --path PATH --grace D --deadline NS -- ARGV...",
		Short:  "Run a command for baton lock or baton elect (internal)",
		Hidden: true,
		Args:   cmdutil.Args(1, -1),
		// The supervisor connects to nothing: the BATON_* variables it
		// inherits (without baton's flags, which may have made them valid)
		// are not checked.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, a []string) error {
			for _, fd := range []int{controlFD, reportFD} {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
					return cmdutil.UsageErrorf("%s is started by baton lock and baton elect only (fd %d: %v)", SuperviseCommand, fd, err)
				}
				syscall.CloseOnExec(fd) // the command must not hold baton's pipes
			}
			ctl, rep := os.NewFile(controlFD, "control"), os.NewFile(reportFD, "report")
			defer ctl.Close()
			enc := json.NewEncoder(rep)
			r := supervise(o, a, ctl, func(pid int) { _ = enc.Encode(superviseReport{Started: pid}) })
			if r.Error != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "baton: %s\n", r.Error)
			}
			_ = enc.Encode(r)
			_ = rep.Close()
			return cmdutil.ChildStatus(r.Status)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.grace, "grace", 10*time.Second, "SIGKILL this long after SIGTERM")
	f.Int64Var(&o.deadline, "deadline", 0, "validity deadline, CLOCK_MONOTONIC nanoseconds")
	f.StringVar(&o.path, "path", "", "the command's executable")
	return cmd
}

// monoNow reads CLOCK_MONOTONIC, which every process of the machine shares
// (Go's own monotonic readings are relative to the process).
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// monoDeadline converts a deadline of this process to CLOCK_MONOTONIC.
func monoDeadline(t time.Time) int64 { return monoNow() + int64(time.Until(t)) }

// supervisor is the state of one supervised command.
type supervisor struct {
	pid, pgid  int
	grace      time.Duration
	status     int
	exited     bool // the command itself was reaped
	none       bool // no child of the supervisor is left, zombies included
	groupGone  bool
	stopping   bool
	killing    bool
	killed     bool
	cause      string
	killTimer  *time.Timer
	killC      <-chan time.Time
	parentPID  int
	supervisor int
}

func supervise(o superviseOptions, argv []string, ctl io.Reader, started func(pid int)) superviseReport {
	// Orphans of the command are reparented here, not to init, so that
	// they are found, stopped and reaped.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return superviseReport{Status: cmdutil.ExitError, Error: fmt.Sprintf("become subreaper: %v", err)}
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGCHLD, parentDeath)
	defer signal.Stop(sigs)
	s := &supervisor{grace: o.grace, parentPID: os.Getppid(), supervisor: os.Getpid()}

	pid, err := syscall.ForkExec(o.path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		err := startError(argv[0], err)
		return superviseReport{Status: cmdutil.ExitCode(err), Error: err.Error()}
	}
	s.pid, s.pgid = pid, pid
	started(pid)

	msgs := make(chan string, 16)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
	}()
	deadline := time.NewTimer(time.Duration(o.deadline - monoNow()))
	defer deadline.Stop()
	// Reaping is driven by SIGCHLD; the tick catches coalesced signals and
	// repeats SIGKILL for processes reparented here while killing.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer func() {
		if s.killTimer != nil {
			s.killTimer.Stop()
		}
	}()

	for {
		s.reap()
		if s.exited && !s.stopping {
			s.stop("") // whatever the command left behind goes with it
		}
		if s.exited && s.none {
			return superviseReport{Status: s.status, Cause: s.cause, Killed: s.killed}
		}
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				msgs = nil
				s.stop(causeParent)
			case m == "stop":
				s.stop(causeStop)
			case strings.HasPrefix(m, "stop "): // a release request: its signal first
				if n, err := strconv.Atoi(strings.TrimPrefix(m, "stop ")); err == nil && n > 0 && n < 65 {
					s.stopWith(causeRequest, syscall.Signal(n))
				}
			case strings.HasPrefix(m, "deadline "):
				ns, err := strconv.ParseInt(strings.TrimPrefix(m, "deadline "), 10, 64)
				if err == nil && !s.stopping {
					deadline.Reset(time.Duration(ns - monoNow()))
				}
			}
		case <-deadline.C:
			s.stop(CauseDeadline)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGCHLD:
			case parentDeath:
				// Sent when the thread that started us exits; only a
				// changed parent means baton itself is gone.
				if os.Getppid() != s.parentPID {
					s.stop(causeParent)
				}
			default:
				s.stop(causeSignal)
			}
		case <-s.killC:
			s.killC = nil
			s.killing = true
			s.killed = s.signalAll(syscall.SIGKILL)
		case <-tick.C:
			if s.killing {
				s.signalAll(syscall.SIGKILL)
			}
		}
	}
}

// stop sends SIGTERM to everything and arms SIGKILL after the grace. The
// first cause is kept; an empty cause is the command's own exit.
func (s *supervisor) stop(cause string) { s.stopWith(cause, syscall.SIGTERM) }

// stopWith is stop with sig first instead of SIGTERM.
func (s *supervisor) stopWith(cause string, sig syscall.Signal) {
	if s.stopping {
		return
	}
	s.stopping, s.cause = true, cause
	s.signalAll(sig)
	s.killTimer = time.NewTimer(s.grace)
	s.killC = s.killTimer.C
}

// signalAll signals the command's process group and every child of the
// supervisor (orphans that left the group); it reports whether any
// process got it.
func (s *supervisor) signalAll(sig syscall.Signal) bool {
	hit := false
	if !s.groupGone {
		switch err := syscall.Kill(-s.pgid, sig); {
		case err == nil:
			hit = true
		case errors.Is(err, syscall.ESRCH):
			s.groupGone = true // the id may be reused from now on
		}
	}
	for _, pid := range children(s.supervisor) {
		if syscall.Kill(pid, sig) == nil {
			hit = true
		}
	}
	return hit
}

// reap collects every exited child, keeping the command's own status.
func (s *supervisor) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			s.none = true
			return
		case err != nil || pid == 0:
			s.none = false
			return
		}
		if pid == s.pid {
			s.exited = true
			s.status = ws.ExitStatus()
			if ws.Signaled() {
				s.status = 128 + int(ws.Signal())
			}
		}
	}
}

// children lists the live children of pid from /proc; empty where the
// kernel does not provide the list.
func children(pid int) []int {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
