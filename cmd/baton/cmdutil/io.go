package cmdutil

import (
	"io"
	"os"
	"time"
)

// IO is what the commands read and write, and the environment they see.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Getenv reads an environment variable (BATON_ENDPOINTS,
	// BATON_PASSWORD); nil reads none.
	Getenv func(string) string
	// Executable is the path of the baton binary, which the demo starts
	// again as its workers; empty means os.Executable.
	Executable string
	// Now is the clock for displayed times; nil means time.Now.
	Now func() time.Time
}

// StdIO is the process's standard streams and environment.
func StdIO() IO {
	return IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv}
}
