package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/batonhq/baton/internal/request"
)

// Exit statuses of a command that could not be run, as shells have them.
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// child is a command run under a lock or as leader.
type child struct {
	argv   []string
	path   string   // argv[0] as found by lookCommand
	env    []string // added to baton's own environment
	grace  time.Duration
	exe    string // the baton binary, re-executed as the supervisor
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// requests are the release requests to the holder: the first is
	// passed to the command as reqSignal (then SIGKILL after the grace),
	// and told to onRequest.
	requests  <-chan request.Request
	reqSignal syscall.Signal
	onRequest func(request.Request)
}

// hold is what a child runs under: a *mutex.Lock or an *election.Term.
type hold interface {
	// Done closes when ownership may be lost or was given up.
	Done() <-chan struct{}
	// Deadline is the validity deadline: Done closes by then unless a
	// renewal is acknowledged first.
	Deadline() time.Time
}

// childResult is how a child ended.
type childResult struct {
	// status is the child's exit status; 128+N when signal N killed it.
	status int
	// lost: ownership ended while the child ran, and it was stopped.
	lost bool
	// killed: it outlived the grace after SIGTERM and got SIGKILL.
	killed bool
	// interrupted: baton was interrupted (or its context ended) before
	// the child exited, and stopped it.
	interrupted bool
	// cause is why the supervisor stopped the command by itself (its
	// validity deadline passed, baton died), empty otherwise.
	cause string
	// requested: a release request was passed to the command.
	requested bool
}

// testHookBeforeCommand, when set, runs once the hold is taken, before
// the command is started; it gets the interruptible context.
var testHookBeforeCommand func(ictx context.Context)

// interruptedBeforeCommand is the 128+N exit error when a signal arrived
// after the hold was taken and before the command was started, in which
// case the command is not started; nil otherwise.
func interruptedBeforeCommand(ictx context.Context, what string) error {
	if testHookBeforeCommand != nil {
		testHookBeforeCommand(ictx)
	}
	return interruptedError(ictx, "%s: the command was not started", what)
}

// lookCommand finds name as a shell would, so that a command that cannot
// run is reported before the lock is requested.
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", withCode(exitNotExecutable, fmt.Errorf("%q is not executable: %w", name, err))
	}
	return "", withCode(exitNotFound, fmt.Errorf("command %q not found: %w", name, err))
}

// startError is the exit error for a command that could not be started.
func startError(name string, err error) error {
	code := exitNotExecutable
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = exitNotFound
	}
	return withCode(code, fmt.Errorf("start %s: %w", name, err))
}

// batonExecutable is the binary to re-execute.
func (g *globals) batonExecutable() (string, error) {
	if g.io.Executable != "" {
		return g.io.Executable, nil
	}
	return os.Executable()
}
