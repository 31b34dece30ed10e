package cmdutil

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// interruptSignals end a wait, and stop a command run under a lock or as
// leader. SIGHUP (a closed terminal, a hang-up) is handled like SIGTERM.
var interruptSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// errInterrupted is the cause of an interruptible context ended by a signal.
type errInterrupted struct{ sig syscall.Signal }

func (e errInterrupted) Error() string { return fmt.Sprintf("interrupted by %v", e.sig) }

// Interruptible returns a context that the first of interruptSignals ends,
// with an errInterrupted cause; stop unregisters. Signals are caught for
// the whole run, so none falls between waiting and running a command.
func Interruptible(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, interruptSignals...)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			sig, _ := s.(syscall.Signal)
			cancel(errInterrupted{sig})
		case <-quit:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		<-done
		cancel(context.Canceled)
	}
}

// InterruptedError is the exit error of a wait that ctx's end cut short:
// 128 plus the signal's number, as a shell reports it, or nil if no signal
// ended ctx.
func InterruptedError(ctx context.Context, format string, a ...any) error {
	ie, ok := context.Cause(ctx).(errInterrupted)
	if !ok {
		return nil
	}
	return WithCode(128+int(ie.sig), fmt.Errorf(format+": %v", append(a, ie)...))
}
