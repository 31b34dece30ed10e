package release_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/batonhq/baton/integration/release"
)

const version = "v0.1.0"

// repoRoot is the repository's root: this package's directory is
// integration/release.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// published prepares a copy of the working tree and serves its published
// modules from a proxy on disk; it returns the version it gave them and
// the environment that resolves them there and every other module as
// usual. The version is a pre-release named by the tree's content
// (v0.1.0-prep.HASH): the module cache keeps a version's files for good,
// so a fixed version would be served from an earlier run's tree, and a
// real release's version must never be taken by a test's build. The cache
// entries are removed after the test.
func published(t *testing.T) (v string, env []string) {
	t.Helper()
	dir := t.TempDir()
	if err := release.Copy(repoRoot(t), dir, true); err != nil {
		t.Fatal(err)
	}
	v = "v0.1.0-prep." + treeHash(t, dir)
	tree, err := release.Prep(dir, v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forget(t, v) })
	proxy := t.TempDir()
	if err := tree.Proxy(proxy); err != nil {
		t.Fatal(err)
	}
	upstream, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+strings.TrimSpace(string(upstream)),
		"GONOSUMDB=github.com/batonhq", "GOWORK=off", "GOFLAGS=-mod=mod")
	return v, env
}

// treeHash names the content of the tree at dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// forget removes version v of the published modules from the module cache.
func forget(t *testing.T, v string) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Error(err)
		return
	}
	cache := strings.TrimSpace(string(out))
	for _, m := range release.Published {
		for _, p := range []string{
			filepath.Join(cache, filepath.FromSlash(m.Path)+"@"+v),
		} {
			_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = os.Chmod(path, 0o755)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				t.Error(err)
			}
		}
		files, _ := filepath.Glob(filepath.Join(cache, "cache", "download", filepath.FromSlash(m.Path), "@v", v+".*"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Error(err)
			}
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// TestPrepRequiresTheReleaseNotTheTree: a prepared go.mod names every
// published module at the version and replaces none; the integration
// module, never published, keeps its replace directives.
func TestPrepRequiresTheReleaseNotTheTree(t *testing.T) {
	dir := t.TempDir()
	if err := release.Copy(repoRoot(t), dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := release.Prep(dir, version); err != nil {
		t.Fatal(err)
	}
	for _, m := range release.Published {
		name := filepath.Join(dir, m.Dir, "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Replace {
			t.Errorf("%s: replace %s => %s left in a release", m.Dir, r.Old.Path, r.New.Path)
		}
		sum, _ := os.ReadFile(filepath.Join(dir, m.Dir, "go.sum"))
		for _, r := range f.Require {
			if !strings.HasPrefix(r.Mod.Path, "github.com/batonhq/") {
				continue
			}
			if r.Mod.Version != version {
				t.Errorf("%s requires %s %s, want %s", m.Dir, r.Mod.Path, r.Mod.Version, version)
			}
			for _, suffix := range []string{" " + version + " h1:", " " + version + "/go.mod h1:"} {
				if !bytes.Contains(sum, []byte(r.Mod.Path+suffix)) {
					t.Errorf("%s/go.sum has no line %q", m.Dir, r.Mod.Path+suffix)
				}
			}
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "integration", "go.mod"))
	if !bytes.Contains(data, []byte("replace")) {
		t.Error("the integration module lost its replace directives")
	}
	if _, err := release.Prep(dir, "0.1"); err == nil {
		t.Error("Prep accepted version 0.1")
	}
}

// TestInstallTheReleasedCLI: `go install …/cmd/baton@VERSION`, as a user
// runs it once the tags are pushed, builds from the published modules
// alone, and the binary reports the version.
func TestInstallTheReleasedCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI from a module proxy")
	}
	v, env := published(t)
	bin := t.TempDir()
	env = append(env, "GOBIN="+bin)
	run(t, t.TempDir(), env, "go", "install", "github.com/batonhq/baton/cmd/baton@"+v)
	out := run(t, t.TempDir(), env, filepath.Join(bin, "baton"), "--version")
	if !strings.Contains(out, "baton version "+v) {
		t.Fatalf("baton --version printed %q, want it to name %s", out, v)
	}
}

// forbidden are the modules an application that imports baton's library
// must not find in its module graph: the server's, the CLI's and the
// tests'. Where etcd's own client already brings one (its go.mod and
// grpc's), baton adds nothing and the check says so.
var forbidden = []string{
	"go.etcd.io/etcd/server/v3", "go.etcd.io/bbolt", "go.etcd.io/raft/v3",
	"github.com/chromedp/", "github.com/jackc/pgx", "modernc.org/sqlite",
	"github.com/anishathalye/porcupine", "go.uber.org/goleak", "github.com/spf13/cobra",
	"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/",
}

// footprint is what a scratch module importing imports costs: go.sum
// lines and the modules of `go list -m all`.
func footprint(t *testing.T, env []string, require []string, imports []string) (sumLines int, mods []string) {
	t.Helper()
	dir := t.TempDir()
	gomod := "module example.com/importer\n\ngo 1.26.0\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		src.WriteString("\t_ \"" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, env, "go", append([]string{"get"}, require...)...)
	run(t, dir, env, "go", "mod", "tidy")
	run(t, dir, env, "go", "build", "-o", os.DevNull, ".")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		if sc.Text() != "" {
			sumLines++
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(run(t, dir, env, "go", "list", "-m", "all")), "\n")[1:] {
		mods = append(mods, strings.Fields(line)[0])
	}
	return sumLines, mods
}

// TestImporterFootprint: an application importing mutex, election,
// session, fencing and shard at the release gets go.sum ≤ 90 lines and
// none of the server's, the CLI's or the tests' modules that etcd's
// client does not already bring; the figures beside etcd's concurrency
// package alone.
func TestImporterFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules through a proxy")
	}
	v, env := published(t)
	etcdSum, etcdMods := footprint(t, env, []string{"go.etcd.io/etcd/client/v3@v3.7.3"},
		[]string{"go.etcd.io/etcd/client/v3/concurrency"})
	lib := []string{"mutex", "election", "session", "fencing", "shard"}
	var imports []string
	for _, p := range lib {
		imports = append(imports, "github.com/batonhq/baton/"+p)
	}
	batonSum, batonMods := footprint(t, env, []string{"github.com/batonhq/baton@" + v}, imports)
	t.Logf("FIGURE importer go.sum lines: baton (%s) %d, etcd concurrency alone %d", strings.Join(lib, ", "), batonSum, etcdSum)
	t.Logf("FIGURE importer modules (go list -m all): baton %d, etcd concurrency alone %d", len(batonMods), len(etcdMods))
	var added []string
	for _, m := range batonMods {
		if !slices.Contains(etcdMods, m) {
			added = append(added, m)
		}
	}
	t.Logf("modules baton adds to etcd's: %s", strings.Join(added, " "))
	if batonSum > 90 {
		t.Errorf("go.sum has %d lines, want at most 90", batonSum)
	}
	for _, f := range forbidden {
		for _, m := range batonMods {
			if !strings.HasPrefix(m, f) {
				continue
			}
			if slices.Contains(etcdMods, m) {
				t.Logf("%s is in the graph, brought by etcd's client itself (etcd concurrency alone has it)", m)
			} else {
				t.Errorf("%s is in an importer's module graph", m)
			}
		}
	}
}

// TestPrepAgainReplacesTheHashes: a release prepared twice keeps only the
// second preparation's lines, sorted as the go command sorts go.sum, and
// Check accepts that tree and refuses one changed after it.
func TestPrepAgainReplacesTheHashes(t *testing.T) {
	dir := t.TempDir()
	if err := release.Copy(repoRoot(t), dir, true); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "tree"}} {
		run(t, dir, os.Environ(), "git", args...)
	}
	if _, err := release.Prep(dir, version); err != nil {
		t.Fatal(err)
	}
	// A change after the first preparation, as a fix before the tag.
	if err := os.WriteFile(filepath.Join(dir, "mutex", "zz_fix.go"), []byte("package mutex\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := release.Prep(dir, version); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "cmd", "baton", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(sum), "github.com/batonhq/baton "+version+" h1:"); n != 1 {
		t.Errorf("cmd/baton/go.sum has %d lines for the library's zip at %s, want 1", n, version)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(sum)), "\n") {
		lines = append(lines, l)
	}
	if !slices.IsSortedFunc(lines, func(a, b string) int { return compareSumLines(a, b) }) {
		t.Error("cmd/baton/go.sum is not in the go command's order")
	}
	run(t, dir, os.Environ(), "git", "add", "-A")
	run(t, dir, os.Environ(), "git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "release")
	if bad, err := release.Check(dir, version); err != nil || len(bad) != 0 {
		t.Fatalf("Check of the prepared commit: %v %q", err, bad)
	}
	if err := os.WriteFile(filepath.Join(dir, "mutex", "zz_fix.go"), []byte("package mutex\n\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := release.Clean(dir); err == nil {
		t.Error("Clean accepted a tree with an uncommitted change")
	}
	run(t, dir, os.Environ(), "git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "late change")
	if bad, err := release.Check(dir, version); err != nil || len(bad) == 0 {
		t.Fatalf("Check accepted go.sum files hashed before a later change: %v", err)
	}
}

// compareSumLines orders go.sum lines as module.Sort orders their modules.
func compareSumLines(a, b string) int {
	fa, fb := strings.Fields(a), strings.Fields(b)
	ms := []module.Version{{Path: fa[0], Version: fa[1]}, {Path: fb[0], Version: fb[1]}}
	if fa[0] == fb[0] && fa[1] == fb[1] {
		return 0
	}
	module.Sort(ms)
	if ms[0].Path == fa[0] && ms[0].Version == fa[1] {
		return -1
	}
	return 1
}
