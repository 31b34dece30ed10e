package release_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

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

// published prepares a copy of the working tree for version and serves its
// published modules from a proxy on disk; it returns the environment that
// resolves them there and every other module as usual.
func published(t *testing.T) (tree *release.Tree, env []string) {
	t.Helper()
	dir := t.TempDir()
	if err := release.Copy(repoRoot(t), dir, true); err != nil {
		t.Fatal(err)
	}
	tree, err := release.Prep(dir, version)
	if err != nil {
		t.Fatal(err)
	}
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
		"GONOSUMDB=github.com/batonhq", "GONOSUMCHECK=1", "GOWORK=off", "GOFLAGS=-mod=mod")
	return tree, env
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
	_, env := published(t)
	bin := t.TempDir()
	env = append(env, "GOBIN="+bin)
	run(t, t.TempDir(), env, "go", "install", "github.com/batonhq/baton/cmd/baton@"+version)
	out := run(t, t.TempDir(), env, filepath.Join(bin, "baton"), "--version")
	if !strings.Contains(out, "baton version "+version) {
		t.Fatalf("baton --version printed %q, want it to name %s", out, version)
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
	_, env := published(t)
	etcdSum, etcdMods := footprint(t, env, []string{"go.etcd.io/etcd/client/v3@v3.7.3"},
		[]string{"go.etcd.io/etcd/client/v3/concurrency"})
	lib := []string{"mutex", "election", "session", "fencing", "shard"}
	var imports []string
	for _, p := range lib {
		imports = append(imports, "github.com/batonhq/baton/"+p)
	}
	batonSum, batonMods := footprint(t, env, []string{"github.com/batonhq/baton@" + version}, imports)
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
