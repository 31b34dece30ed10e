package cli

import "github.com/batonhq/baton/cmd/baton/cmdutil"

// IO is what the commands read and write, and the environment they see.
type IO = cmdutil.IO

// StdIO is the process's standard streams and environment.
func StdIO() IO { return cmdutil.StdIO() }

// The exit codes of Main, defined with the shared plumbing that maps
// errors to them (cmdutil).
const (
	ExitOK            = cmdutil.ExitOK
	ExitError         = cmdutil.ExitError
	ExitUsage         = cmdutil.ExitUsage
	ExitUnavailable   = cmdutil.ExitUnavailable
	ExitNotAcquired   = cmdutil.ExitNotAcquired
	ExitRefused       = cmdutil.ExitRefused
	ExitDenied        = cmdutil.ExitDenied
	ExitOwnershipLost = cmdutil.ExitOwnershipLost
	ExitPartial       = cmdutil.ExitPartial
)
