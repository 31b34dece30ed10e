package fencing_test

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/fencing"
)

// A resource in one process keeps its high-water mark in memory: it admits
// a token equal to or above the highest it has seen, per resource, and
// rejects a lower one.
func ExampleMemoryGuard() {
	ctx := context.Background()
	g := fencing.NewMemoryGuard()
	fmt.Println(g.Admit(ctx, "reports", 12))
	fmt.Println(g.Admit(ctx, "reports", 11))  // a paused former holder wakes up
	fmt.Println(g.Admit(ctx, "invoices", 11)) // another resource, its own mark
	fmt.Println("highest:", g.Highest("reports"))
	// Output:
	// <nil>
	// fencing: stale token 11 for resource "reports": highest admitted is 12
	// <nil>
	// highest: 12
}
