package cmdutil

import (
	"golang.org/x/sys/unix"
)

// hideMemory makes this process non-dumpable: its /proc/PID/environ (which
// may hold BATON_PASSWORD) and its memory (which holds the password) can
// no longer be read by processes of the same user, the command it runs
// included; only a process with CAP_SYS_PTRACE can. It also disables core
// dumps, which would hold the password too.
func hideMemory() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
