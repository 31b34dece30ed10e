package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/batonhq/baton/integration/scale"
)

// runChild is the body of "baton-scale child ...", a child process of the
// processes phase (scale.Processes runs them): it holds its locks against
// the parent's etcd, writes through the parent's guard, and returns the
// exit code. SIGINT and SIGTERM (the parent's cancel) end it early.
func runChild(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return scale.Child(ctx, args, os.Stdout, os.Stderr)
}
