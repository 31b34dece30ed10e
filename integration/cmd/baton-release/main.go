// Command baton-release prepares a release commit: it rewrites the
// published modules' go.mod and go.sum files so that each requires the
// others at the release's version instead of the same commit's
// directories (docs/releasing.md). It changes nothing else.
//
//	go -C integration run ./cmd/baton-release -version v0.1.0 -repo ..
//	go -C integration run ./cmd/baton-release -version v0.1.0 -repo .. -check
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/batonhq/baton/integration/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "baton-release:", err)
		os.Exit(1)
	}
}

func run() error {
	version := flag.String("version", "", "the release's version, e.g. v0.1.0")
	repo := flag.String("repo", "..", "the repository's root")
	check := flag.Bool("check", false, "change nothing: fail unless the go.mod and go.sum files are those -version's preparation writes")
	flag.Parse()
	if *version == "" {
		return fmt.Errorf("-version is required")
	}
	if err := release.Clean(*repo); err != nil {
		return err
	}
	if *check {
		bad, err := release.Check(*repo, *version)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("not a release commit for %s:\n  %s", *version, strings.Join(bad, "\n  "))
		}
		fmt.Printf("a release commit for %s: every go.mod and go.sum of the published modules matches the tree\n", *version)
		return nil
	}
	tmp, err := os.MkdirTemp("", "baton-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Hash what the tags will hold: the files git tracks.
	if err := release.Copy(*repo, tmp, false); err != nil {
		return err
	}
	if _, err := release.Prep(tmp, *version); err != nil {
		return err
	}
	for _, m := range release.Published {
		for _, f := range []string{"go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(tmp, m.Dir, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(*repo, m.Dir, f), b, 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("%s: requires the published modules at %s; tag %s\n", m.Path, *version, release.Tag(m, *version))
	}
	return nil
}
