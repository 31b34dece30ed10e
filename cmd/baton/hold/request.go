package hold

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/request"
)

// `baton unlock NAME --request --reason TEXT` asks the holder of a lock to
// let go (see package internal/request: a request on the holder's lease,
// audited in the same transaction, which only requesters and operators may
// write).
// `baton lock` passes a request to its command as --release-signal
// (SIGTERM by default), then SIGKILL after --grace, and releases the lock
// once the command has exited; without a command it releases at once.

// addReleaseSignalFlag is --release-signal of lock and elect.
func addReleaseSignalFlag(f *pflag.FlagSet, name *string) {
	f.StringVar(name, "release-signal", "TERM", "the signal that passes a release request (baton unlock --request) to the command; SIGKILL follows after --grace")
}

// parseSignal takes TERM, SIGTERM or a number from 1 to 64.
func parseSignal(name string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, cmdutil.UsageErrorf("--release-signal %d: a signal number is 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	s := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(name), "SIG"))
	if s == 0 {
		return 0, cmdutil.UsageErrorf("--release-signal %s: not a signal name (TERM, INT, HUP, USR1, ...)", cmdutil.SafeQ(name))
	}
	return s, nil
}

// requestsOf is the release requests of a hold that can receive them.
func requestsOf(h any) <-chan request.Request {
	if rr, ok := h.(interface {
		ReleaseRequested() <-chan request.Request
	}); ok {
		return rr.ReleaseRequested()
	}
	return nil
}

// requested reports a release request passed on (reason and requester are
// untrusted text: escaped).
func (s *statusWriter) requested(r request.Request, passed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emit(event{Event: eventRequested, Reason: r.Reason, By: r.By},
		fmt.Sprintf("release of %s requested by %s: %s; %s", s.what(), cmdutil.Safe(r.By), cmdutil.Safe(r.Reason), passed))
}

const eventRequested = "release-requested"
