package apicheck

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Module is the module whose API the record covers.
const Module = "github.com/batonhq/baton"

// FindRoot returns the directory of Module's go.mod: dir or the nearest
// directory above it that holds it.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if modulePath(filepath.Join(d, "go.mod")) == Module {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of module %s in %s or above", Module, dir)
		}
	}
}

func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	return ""
}

// Repo is the API of the module in Root and what its repository records.
type Repo struct {
	Root      string
	Current   []string // Features(Root)
	Record    Record   // Root/api
	Changelog Top      // Root/CHANGELOG.md's topmost heading
}

// LoadRepo reads the API of the module in root, its api/ directory and its
// CHANGELOG.md (which may be missing: then no version is announced).
func LoadRepo(root string) (*Repo, error) {
	cur, err := Features(root)
	if err != nil {
		return nil, err
	}
	rec, err := ReadRecord(filepath.Join(root, "api"))
	if err != nil {
		return nil, err
	}
	r := &Repo{Root: root, Current: cur, Record: rec}
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		r.Changelog = ReadChangelog(string(b))
	}
	return r, nil
}

// Check returns the problems Check finds in the repository.
func (r *Repo) Check() []string { return Check(r.Current, r.Record, r.Changelog) }

// WriteNext rewrites api/next.txt with Next's features and returns how
// many it holds.
func (r *Repo) WriteNext() (int, error) {
	next := Next(r.Current, r.Record)
	var b strings.Builder
	for _, f := range next {
		b.WriteString(f)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(r.Root, "api", NextFile), []byte(b.String()), 0o644); err != nil {
		return 0, err
	}
	rec, err := ReadRecord(filepath.Join(r.Root, "api"))
	if err != nil {
		return 0, err
	}
	r.Record = rec
	return len(next), nil
}
