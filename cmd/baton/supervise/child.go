package supervise

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

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/request"
)

// Exit statuses of a command that could not be run, as shells have them.
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// Child is a command run under a lock or as leader.
type Child struct {
	Argv   []string
	Path   string   // argv[0] as found by lookCommand
	Env    []string // added to baton's own environment
	Grace  time.Duration
	Exe    string // the baton binary, re-executed as the supervisor
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Requests are the release requests to the holder: the first is
	// passed to the command as reqSignal (then SIGKILL after the grace),
	// and told to onRequest.
	Requests  <-chan request.Request
	ReqSignal syscall.Signal
	OnRequest func(request.Request)
}

// Hold is what a child runs under: a *mutex.Lock or an *election.Term.
type Hold interface {
	// Done closes when ownership may be lost or was given up.
	Done() <-chan struct{}
	// Deadline is the validity deadline: Done closes by then unless a
	// renewal is acknowledged first.
	Deadline() time.Time
}

// ChildResult is how a child ended.
type ChildResult struct {
	// Status is the child's exit status; 128+N when signal N killed it.
	Status int
	// Lost: ownership ended while the child ran, and it was stopped.
	Lost bool
	// Killed: it outlived the grace after SIGTERM and got SIGKILL.
	Killed bool
	// interrupted: baton was interrupted (or its context ended) before
	// the child exited, and stopped it.
	interrupted bool
	// Cause is why the supervisor stopped the command by itself (its
	// validity deadline passed, baton died), empty otherwise.
	Cause string
	// Requested: a release request was passed to the command.
	Requested bool
}

// TestHookBeforeCommand, when set, runs once the hold is taken, before
// the command is started; it gets the interruptible context.
var TestHookBeforeCommand func(ictx context.Context)

// InterruptedBeforeCommand is the 128+N exit error when a signal arrived
// after the hold was taken and before the command was started, in which
// case the command is not started; nil otherwise.
func InterruptedBeforeCommand(ictx context.Context, what string) error {
	if TestHookBeforeCommand != nil {
		TestHookBeforeCommand(ictx)
	}
	return cmdutil.InterruptedError(ictx, "%s: the command was not started", what)
}

// LookCommand finds name as a shell would, so that a command that cannot
// run is reported before the lock is requested.
func LookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", cmdutil.WithCode(exitNotExecutable, fmt.Errorf("%q is not executable: %w", name, err))
	}
	return "", cmdutil.WithCode(exitNotFound, fmt.Errorf("command %q not found: %w", name, err))
}

// startError is the exit error for a command that could not be started.
func startError(name string, err error) error {
	code := exitNotExecutable
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = exitNotFound
	}
	return cmdutil.WithCode(code, fmt.Errorf("start %s: %w", name, err))
}

// BatonExecutable is the binary to re-execute.
func BatonExecutable(g *cmdutil.Env) (string, error) {
	if g.IO.Executable != "" {
		return g.IO.Executable, nil
	}
	return os.Executable()
}
