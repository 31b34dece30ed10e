// Package supervise runs a command under a hold: the child process, its
// supervisor (a second process that stops the command when the hold's
// validity ends, even if baton dies), and the hidden command the
// supervisor runs as.
package supervise
