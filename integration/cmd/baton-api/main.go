// Command baton-api records the exported API of the library module's
// public packages and checks a change against the record in api/
// (docs/api-policy.md).
//
//	baton-api [-root DIR] list    print the API, one feature a line, in Go's api format
//	baton-api [-root DIR] check   compare it with api/ and CHANGELOG.md (make api-check)
//	baton-api [-root DIR] next    rewrite api/next.txt with the features no release records, then check (make api)
//
// DIR is the library module's directory; by default the nearest one at or
// above the working directory. check and next exit with status 1 when a
// problem is found, each printed with the feature it is about and what to
// do.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/batonhq/baton/integration/apicheck"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "", "the library module's directory (default: found from the working directory)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: baton-api [-root DIR] list|check|next")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	dir := *root
	if dir == "" {
		d, err := apicheck.FindRoot(".")
		if err != nil {
			fmt.Fprintln(stderr, "baton-api:", err)
			return 2
		}
		dir = d
	}
	switch fs.Arg(0) {
	case "list":
		cur, err := apicheck.Features(dir)
		if err != nil {
			fmt.Fprintln(stderr, "baton-api:", err)
			return 1
		}
		for _, f := range cur {
			fmt.Fprintln(stdout, f)
		}
		return 0
	case "check", "next":
		r, err := apicheck.LoadRepo(dir)
		if err != nil {
			fmt.Fprintln(stderr, "baton-api:", err)
			return 1
		}
		if fs.Arg(0) == "next" {
			n, err := r.WriteNext()
			if err != nil {
				fmt.Fprintln(stderr, "baton-api:", err)
				return 1
			}
			fmt.Fprintf(stdout, "api/%s: %d features added since the last release\n", apicheck.NextFile, n)
		}
		problems := r.Check()
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		if len(problems) > 0 {
			noun := "problems"
			if len(problems) == 1 {
				noun = "problem"
			}
			fmt.Fprintf(stderr, "baton-api: %d %s with the API record (docs/api-policy.md)\n", len(problems), noun)
			return 1
		}
		releases := "no release"
		if n := len(r.Record.Releases); n > 0 {
			releases = "releases up to " + r.Record.Releases[n-1].Version.String()
		}
		fmt.Fprintf(stdout, "api: %d features of %s match the record (%s, %d in api/%s)\n",
			len(r.Current), apicheck.Module, releases, len(r.Record.Next), apicheck.NextFile)
		return 0
	default:
		fs.Usage()
		return 2
	}
}
