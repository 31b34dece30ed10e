// Package release prepares the repository's modules for a tagged release
// and serves them from a module proxy on disk, so that what a release
// will publish is built and measured before it is tagged
// (docs/releasing.md).
//
// On main, the CLI's and the test server's go.mod files replace the baton
// modules they require with the same commit's directories. A release
// commit instead requires each at the release's version, with go.sum lines
// for them, as `go install github.com/batonhq/baton/cmd/baton@VERSION`
// needs. Prep writes that commit's go.mod and go.sum files; Proxy writes the
// module zips a proxy would serve for the tags.
package release

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// Module is one of the repository's Go modules.
type Module struct {
	Path string // module path
	Dir  string // directory, relative to the repository's root
}

// Published are the modules a release tags, each after those it requires:
// the library, the embedded etcd the CLI links, the CLI. Their tags are
// VERSION, internal/embedetcd/VERSION and cmd/baton/VERSION. The
// integration module is never published: it keeps its replace directives.
var Published = []Module{
	{"github.com/batonhq/baton", "."},
	{"github.com/batonhq/baton/internal/embedetcd", "internal/embedetcd"},
	{"github.com/batonhq/baton/cmd/baton", "cmd/baton"},
}

// Tag is the git tag of module m at version v.
func Tag(m Module, v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// Tree is a copy of the repository prepared for a release.
type Tree struct {
	Root    string            // the copy's root
	Version string            // the release's version
	zips    map[string][]byte // module path → zip, as a proxy serves it
}

// Copy copies the repository at repo into dir: the files git tracks and,
// with untracked, the files it would track (not ignored), so that a test
// sees the working tree's changes.
func Copy(repo, dir string, untracked bool) error {
	args := []string{"-C", repo, "ls-files", "-z", "--cached"}
	if untracked {
		args = append(args, "--others", "--exclude-standard")
	}
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return fmt.Errorf("release: git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		src, dst := filepath.Join(repo, f), filepath.Join(dir, f)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		} else if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// Prep rewrites, in the tree at root, the published modules' go.mod and
// go.sum files for version v: each requirement of a published module is
// set to v, its replace directive dropped, and its go.sum lines added, as
// computed from the module's zip at v. Modules are prepared in Published's
// order, so that a module's zip holds its own prepared go.mod before the
// modules that require it hash it.
func Prep(root, v string) (*Tree, error) {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return nil, fmt.Errorf("release: version %q is not a canonical semantic version such as v0.1.0", v)
	}
	t := &Tree{Root: root, Version: v, zips: map[string][]byte{}}
	sums := map[string][]string{} // module path → its go.sum lines
	for _, m := range Published {
		dir := filepath.Join(root, m.Dir)
		var extra []string
		if err := rewriteGoMod(dir, v, func(dep string) { extra = append(extra, sums[dep]...) }); err != nil {
			return nil, fmt.Errorf("release: %s: %w", m.Path, err)
		}
		if len(extra) > 0 {
			if err := addSums(filepath.Join(dir, "go.sum"), extra); err != nil {
				return nil, fmt.Errorf("release: %s: %w", m.Path, err)
			}
		}
		var zb bytes.Buffer
		if err := modzip.CreateFromDir(&zb, module.Version{Path: m.Path, Version: v}, dir); err != nil {
			return nil, fmt.Errorf("release: zip %s: %w", m.Path, err)
		}
		t.zips[m.Path] = zb.Bytes()
		lines, err := sumLines(m.Path, v, zb.Bytes(), filepath.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		sums[m.Path] = lines
	}
	return t, nil
}

// isPublished reports whether path is one of the published modules.
func isPublished(path string) bool {
	return slices.ContainsFunc(Published, func(m Module) bool { return m.Path == path })
}

// rewriteGoMod sets the go.mod in dir's requirements of published modules
// to v and drops their replace directives, calling required for each.
func rewriteGoMod(dir, v string, required func(path string)) error {
	name := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return err
	}
	for _, r := range slices.Clone(f.Replace) {
		if isPublished(r.Old.Path) {
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	for _, r := range f.Require {
		if isPublished(r.Mod.Path) {
			if err := f.AddRequire(r.Mod.Path, v); err != nil {
				return err
			}
			required(r.Mod.Path)
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(name, out, 0o644)
}

// sumLines are the go.sum lines of module path at v: the zip's hash and
// the go.mod's.
func sumLines(path, v string, zipData []byte, gomod string) ([]string, error) {
	zf, err := os.CreateTemp("", "baton-release-*.zip")
	if err != nil {
		return nil, err
	}
	defer os.Remove(zf.Name())
	if _, err := zf.Write(zipData); err != nil {
		zf.Close()
		return nil, err
	}
	if err := zf.Close(); err != nil {
		return nil, err
	}
	h, err := dirhash.HashZip(zf.Name(), dirhash.Hash1)
	if err != nil {
		return nil, err
	}
	mod, err := os.ReadFile(gomod)
	if err != nil {
		return nil, err
	}
	hm, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(mod)), nil
	})
	if err != nil {
		return nil, err
	}
	return []string{path + " " + v + " " + h, path + " " + v + "/go.mod " + hm}, nil
}

// addSums puts lines into the go.sum at name: every line already there for
// a module the new lines name is dropped first (a release prepared again
// must not keep an earlier preparation's hashes), and the file is sorted
// as the go command sorts it (module.Sort: by path, then by semantic
// version, "/go.mod" after the version's own line).
func addSums(name string, lines []string) error {
	old, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	replaced := map[string]bool{}
	for _, l := range lines {
		replaced[strings.Fields(l)[0]] = true
	}
	type entry struct {
		mod  module.Version
		line string
	}
	var entries []entry
	seen := map[string]bool{}
	for _, l := range append(strings.Split(string(old), "\n"), lines...) {
		f := strings.Fields(l)
		if len(f) != 3 || seen[l] {
			continue
		}
		if replaced[f[0]] && !slices.Contains(lines, l) {
			continue
		}
		seen[l] = true
		entries = append(entries, entry{module.Version{Path: f[0], Version: f[1]}, l})
	}
	mods := make([]module.Version, len(entries))
	byMod := map[module.Version]string{}
	for i, e := range entries {
		mods[i] = e.mod
		byMod[e.mod] = e.line
	}
	module.Sort(mods)
	var out strings.Builder
	for _, m := range mods {
		out.WriteString(byMod[m] + "\n")
	}
	return os.WriteFile(name, []byte(out.String()), 0o644)
}

// Check reports every go.sum line of a published module at the tree's
// version that differs from what Prep computes from the tree at root: a
// release commit whose go.sum files do not match its own files cannot be
// built once tagged.
func Check(root, v string) ([]string, error) {
	tmp, err := os.MkdirTemp("", "baton-release-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := Copy(root, tmp, false); err != nil {
		return nil, err
	}
	if _, err := Prep(tmp, v); err != nil {
		return nil, err
	}
	var bad []string
	for _, m := range Published {
		want, err := os.ReadFile(filepath.Join(tmp, m.Dir, "go.sum"))
		if err != nil {
			return nil, err
		}
		have, err := os.ReadFile(filepath.Join(root, m.Dir, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for _, l := range strings.Split(string(want), "\n") {
			if f := strings.Fields(l); len(f) == 3 && isPublished(f[0]) && !strings.Contains(string(have), l+"\n") {
				bad = append(bad, fmt.Sprintf("%s/go.sum lacks %q", m.Dir, l))
			}
		}
		for _, l := range strings.Split(string(have), "\n") {
			if f := strings.Fields(l); len(f) == 3 && isPublished(f[0]) && !strings.Contains(string(want), l+"\n") {
				bad = append(bad, fmt.Sprintf("%s/go.sum has %q, which the tree does not hash to", m.Dir, l))
			}
		}
		wantMod, _ := os.ReadFile(filepath.Join(tmp, m.Dir, "go.mod"))
		haveMod, _ := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
		if !bytes.Equal(wantMod, haveMod) {
			bad = append(bad, fmt.Sprintf("%s/go.mod is not prepared for %s (run make release-prep VERSION=%s)", m.Dir, v, v))
		}
	}
	return bad, nil
}

// Clean reports whether the repository at root has no uncommitted change:
// the hashes are of the files git tracks, as they are on disk.
func Clean(root string) error {
	out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return fmt.Errorf("release: git status: %w", err)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		return fmt.Errorf("release: the working tree has uncommitted changes; commit them first, the tags will hold the commit:\n%s", out)
	}
	return nil
}

// Proxy writes the published modules at the tree's version into dir, laid
// out as a GOPROXY serves them (GOPROXY=file://DIR): each module's list,
// .info, .mod and .zip.
func (t *Tree) Proxy(dir string) error {
	for _, m := range Published {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, esc, "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		mod, err := os.ReadFile(filepath.Join(t.Root, m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		files := map[string][]byte{
			"list":              []byte(t.Version + "\n"),
			t.Version + ".info": fmt.Appendf(nil, `{"Version":%q,"Time":"2026-12-07T00:00:00Z"}`, t.Version),
			t.Version + ".mod":  mod,
			t.Version + ".zip":  t.zips[m.Path],
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(vdir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
