// Package hold runs a command under a hold: baton lock (a mutex, a
// semaphore permit, a read or write lock, or a set of mutexes) and baton
// elect (leadership). Both take the hold, start the command under the
// supervisor, and turn the end of the hold and of the command into one
// exit code, on one path (run.go).
package hold
