//go:build !linux

package cmdutil

// hideMemory does nothing here: a process of the same user may read the
// password from this process's environment or memory.
func hideMemory() {}
