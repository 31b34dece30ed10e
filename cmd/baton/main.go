// Command baton inspects and operates baton's locks and elections on etcd,
// runs commands under a lock or as leader, serves an embedded etcd for
// local use, and shows what fencing tokens are for (baton demo).
//
// See docs/cli.md, or baton --help.
package main

import (
	"context"
	"os"

	"github.com/batonhq/baton/cmd/baton/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.StdIO()))
}
