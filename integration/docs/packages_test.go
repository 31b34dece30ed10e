package docs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module path; the map names packages relative to it.
const module = "github.com/batonhq/baton"

// mapHeading opens docs/design.md's package map.
const mapHeading = "## The packages, and which way they import"

// layer is one row of the package map.
type layer struct {
	n       int
	name    string
	pats    []string     // "p" (exactly p), "p/..." (p and below), "*" (any top-level package)
	imports map[int]bool // the layers it may import from
}

// pkgMap is the package map of docs/design.md.
type pkgMap struct {
	layers []layer
	// except are the imports against the table that the map lists, each
	// with its reason: from → to (module-relative paths).
	except map[[2]string]string
	// forbid are imports the table would allow that the map refuses, each
	// with its reason: from ✗ to.
	forbid map[[2]string]string
}

var (
	rowRE    = regexp.MustCompile("^\\|\\s*(\\d+)\\s+([^|]+?)\\s*\\|([^|]*)\\|([^|]*)\\|\\s*$")
	patRE    = regexp.MustCompile("`([^`]+)`")
	exceptRE = regexp.MustCompile("^- `([^`]+)` → `([^`]+)`: (.+)")
	forbidRE = regexp.MustCompile("^- `([^`]+)` ✗ `([^`]+)`: (.+)")
)

// parseMap reads the package map from the text of docs/design.md.
func parseMap(doc string) (pkgMap, error) {
	_, sec, ok := strings.Cut(doc, "\n"+mapHeading+"\n")
	if !ok {
		return pkgMap{}, fmt.Errorf("no section %q", mapHeading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	m := pkgMap{except: map[[2]string]string{}, forbid: map[[2]string]string{}}
	// A list item's continuation lines join it.
	sec = regexp.MustCompile(`\n {2,}(\S)`).ReplaceAllString(sec, " $1")
	for _, line := range strings.Split(sec, "\n") {
		if e := exceptRE.FindStringSubmatch(line); e != nil {
			m.except[[2]string{e[1], e[2]}] = e[3]
			continue
		}
		if e := forbidRE.FindStringSubmatch(line); e != nil {
			m.forbid[[2]string{e[1], e[2]}] = e[3]
			continue
		}
		r := rowRE.FindStringSubmatch(line)
		if r == nil {
			continue
		}
		n, _ := strconv.Atoi(r[1])
		l := layer{n: n, name: r[2], imports: map[int]bool{}}
		for _, p := range patRE.FindAllStringSubmatch(r[3], -1) {
			if strings.HasPrefix(p[1], "<") {
				continue // prose, not a pattern
			}
			l.pats = append(l.pats, p[1])
		}
		for _, part := range strings.Split(r[4], ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "–")
			a, err := strconv.Atoi(lo)
			b := a
			if isRange {
				b, err = strconv.Atoi(hi)
			}
			if err != nil {
				return pkgMap{}, fmt.Errorf("layer %d: bad layer list %q", n, r[4])
			}
			for i := a; i <= b; i++ {
				l.imports[i] = true
			}
		}
		if n != len(m.layers)+1 || len(l.pats) == 0 {
			return pkgMap{}, fmt.Errorf("row %q: layers must be numbered 1, 2, ... in order, each with packages", line)
		}
		m.layers = append(m.layers, l)
	}
	if len(m.layers) == 0 {
		return pkgMap{}, errors.New("no layers in the package map")
	}
	return m, nil
}

// unit is the package whose row p follows: p itself, or q for a
// package q/internal/... that only q may import.
func unit(p string) string {
	if i := strings.Index(p, "/internal/"); i > 0 {
		return p[:i]
	}
	if strings.HasSuffix(p, "/internal") {
		return strings.TrimSuffix(p, "/internal")
	}
	return p
}

// layerOf is the layer of module-relative package p, or nil: the row of
// its most specific pattern (exact, then the longest p/..., then *).
func (m pkgMap) layerOf(p string) *layer {
	u := unit(p)
	var best *layer
	score := -1
	for i := range m.layers {
		for _, pat := range m.layers[i].pats {
			s := -1
			switch {
			case pat == u:
				s = 1 << 20
			case strings.HasSuffix(pat, "/..."):
				if base := strings.TrimSuffix(pat, "/..."); u == base || strings.HasPrefix(u, base+"/") {
					s = len(base)
				}
			case pat == "*" && !strings.Contains(u, "/"):
				s = 0
			}
			if s > score {
				best, score = &m.layers[i], s
			}
		}
	}
	return best
}

// library is every layer whose name says so: what an application links.
func (m pkgMap) library() []int {
	var out []int
	for _, l := range m.layers {
		if strings.HasPrefix(l.name, "library") {
			out = append(out, l.n)
		}
	}
	return out
}

// checkImports reports every import of the module's packages (graph:
// module-relative path → its imports, module-relative ones only) that
// the map does not allow, every package on no row, and every listed
// exception that no longer exists.
func checkImports(m pkgMap, graph map[string][]string) []string {
	var bad []string
	used := map[[2]string]bool{}
	for _, p := range sortedKeys(graph) {
		lp := m.layerOf(p)
		if lp == nil {
			bad = append(bad, fmt.Sprintf("%s is on no layer of the package map: add it to a row", p))
			continue
		}
		for _, q := range graph[p] {
			lq := m.layerOf(q)
			switch {
			case lq == nil, unit(p) == unit(q):
				// q is reported as a package, or p's own internal package.
			case m.forbid[[2]string{p, q}] != "":
				bad = append(bad, fmt.Sprintf("%s imports %s, which the map refuses: %s", p, q, m.forbid[[2]string{p, q}]))
			case m.except[[2]string{p, q}] != "":
				used[[2]string{p, q}] = true
			case !lp.imports[lq.n]:
				bad = append(bad, fmt.Sprintf("%s (layer %d, %s) imports %s (layer %d, %s): layer %d imports only from layers %v",
					p, lp.n, lp.name, q, lq.n, lq.name, lp.n, sortedKeys(lp.imports)))
			}
		}
	}
	for e := range m.except {
		if _, listed := graph[e[0]]; listed && !used[e] {
			bad = append(bad, fmt.Sprintf("the map lists %s → %s as an exception, but %s does not import %s: remove it", e[0], e[1], e[0], e[1]))
		}
	}
	slices.Sort(bad)
	return bad
}

// checkLibraryDeps reports, for each library package, a chain of imports
// to a package it must not link: a YAML package, or a package of the
// module outside the library and the internal layers (rbac, a tool, a
// command, the harness). deps maps every import path (full) to its
// imports, as go list -deps gives them.
func checkLibraryDeps(m pkgMap, deps map[string][]string) []string {
	lib := m.library()
	allowed := map[int]bool{}
	for _, n := range lib {
		allowed[n] = true
		for i := range m.layers[n-1].imports {
			allowed[i] = true
		}
	}
	forbidden := func(path string) bool {
		if strings.Contains(path, "yaml") {
			return true
		}
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok {
			return false
		}
		l := m.layerOf(rel)
		return l == nil || !allowed[l.n]
	}
	var bad []string
	for _, path := range sortedKeys(deps) {
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok {
			continue
		}
		if l := m.layerOf(rel); l == nil || !slices.Contains(lib, l.n) {
			continue
		}
		// Breadth first, so that the chain reported is a shortest one.
		from := map[string]string{path: ""}
		queue := []string{path}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if forbidden(p) {
				chain := []string{p}
				for q := from[p]; q != ""; q = from[q] {
					chain = append(chain, q)
				}
				slices.Reverse(chain)
				bad = append(bad, fmt.Sprintf("%s links %s: %s", rel, p, strings.Join(chain, " → ")))
				break
			}
			for _, q := range deps[p] {
				if _, seen := from[q]; !seen {
					from[q] = p
					queue = append(queue, q)
				}
			}
		}
	}
	return bad
}

func sortedKeys[K interface{ ~string | ~int }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// goList runs go list -deps -json in each of the repository's modules
// (each on its own go.mod) and returns every package's non-test imports,
// and the repository's own packages.
func goList(t *testing.T, root string) (deps map[string][]string, own []string) {
	t.Helper()
	deps = map[string][]string{}
	seen := map[string]bool{}
	for _, dir := range modules {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-e", "-deps", "-json=ImportPath,Imports,DepOnly,Error", "./...")
		cmd.Dir = filepath.Join(root, dir)
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOWORK=off")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.String())
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for {
			var p struct {
				ImportPath string
				Imports    []string
				DepOnly    bool
				Error      *struct{ Err string }
			}
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if p.Error != nil && !strings.Contains(p.Error.Err, "no non-test Go files") {
				t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
			}
			deps[p.ImportPath] = p.Imports
			if !p.DepOnly && strings.HasPrefix(p.ImportPath, module+"/") && !seen[p.ImportPath] {
				seen[p.ImportPath] = true
				own = append(own, p.ImportPath)
			}
		}
	}
	return deps, own
}

// modules are the repository's Go modules, by directory (the Makefile's
// MODULES).
var modules = []string{".", "internal/embedetcd", "cmd/baton", "integration"}

// moduleGraph is the module's own import graph, module-relative.
func moduleGraph(deps map[string][]string, own []string) map[string][]string {
	g := map[string][]string{}
	for _, p := range own {
		rel := strings.TrimPrefix(p, module+"/")
		g[rel] = []string{}
		for _, q := range deps[p] {
			if r, ok := strings.CutPrefix(q, module+"/"); ok {
				g[rel] = append(g[rel], r)
			}
		}
	}
	return g
}

func readPackageMap(t *testing.T, root string) pkgMap {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseMap(string(doc))
	if err != nil {
		t.Fatalf("docs/design.md: %v", err)
	}
	if len(m.library()) == 0 {
		t.Fatal("docs/design.md: no layer of the package map is marked library")
	}
	return m
}

// TestImportsFollowThePackageMap: every import of the module points down
// docs/design.md's package map, or is one of its listed exceptions.
func TestImportsFollowThePackageMap(t *testing.T) {
	root := moduleRoot(t)
	m := readPackageMap(t, root)
	deps, own := goList(t, root)
	g := moduleGraph(deps, own)
	for _, b := range checkImports(m, g) {
		t.Error(b)
	}
	edges := 0
	for _, qs := range g {
		edges += len(qs)
	}
	t.Logf("%d packages, %d imports between them, checked against %d layers", len(g), edges, len(m.layers))
}

// TestLibraryLinksOnlyWhatItUses: no library package (every top-level
// package but the tools, found by the map's patterns, so a new primitive
// is covered without being named) links rbac, a tool or a YAML package.
func TestLibraryLinksOnlyWhatItUses(t *testing.T) {
	root := moduleRoot(t)
	m := readPackageMap(t, root)
	deps, own := goList(t, root)
	var lib []string
	for _, p := range own {
		if l := m.layerOf(strings.TrimPrefix(p, module+"/")); l != nil && slices.Contains(m.library(), l.n) {
			lib = append(lib, strings.TrimPrefix(p, module+"/"))
		}
	}
	for _, want := range []string{"mutex", "election", "semaphore", "rwmutex", "session", "fencing"} {
		if !slices.Contains(lib, want) {
			t.Errorf("%s is not in the library's layers", want)
		}
	}
	for _, b := range checkLibraryDeps(m, deps) {
		t.Error(b)
	}
	t.Logf("library packages checked: %s", strings.Join(lib, " "))
}

// TestPackageMapCheckFails: the checks refuse the imports the map forbids,
// on a made-up module.
func TestPackageMapCheckFails(t *testing.T) {
	root := moduleRoot(t)
	m := readPackageMap(t, root)
	plain := m
	plain.except = nil // the made-up modules have no exceptions to use
	for _, tt := range []struct {
		name, from, to string
	}{
		{"internal leaf on the core", "internal/keys", "internal/core"},
		{"internal on a primitive", "internal/request", "mutex"},
		{"internal on a tool", "internal/request", "rbac"},
		{"primitive on a peer", "mutex", "election"},
		{"new primitive on a peer", "shard", "mutex"},
		{"shared handle on a primitive", "session", "mutex"},
		{"primitive on a tool", "election", "rbac"},
		{"library on the harness", "mutex", "integration/harness"},
		{"library on a command", "router", "cmd/baton/cli"},
		{"CLI on the harness", "cmd/baton/cli", "integration/bench"},
		{"harness on a command", "integration/bench", "cmd/baton/cli"},
		{"primitive's internal package on a peer", "election/internal/handover", "mutex"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := map[string][]string{tt.from: {tt.to}, tt.to: {}}
			if bad := checkImports(plain, g); len(bad) != 1 || !strings.Contains(bad[0], tt.from+" (layer") {
				t.Errorf("checkImports(%s → %s) = %q, want it refused", tt.from, tt.to, bad)
			}
		})
	}
	for _, ok := range [][2]string{
		{"mutex", "session"}, {"shard", "internal/core"}, {"election", "election/internal/handover"},
		{"integration/cmd/baton-bench", "integration/bench"}, {"examples/singleton", "rbac"}, {"internal/delay", "internal/core"},
	} {
		if bad := checkImports(plain, map[string][]string{ok[0]: {ok[1]}, ok[1]: {}}); len(bad) != 0 {
			t.Errorf("checkImports(%s → %s) = %q, want it allowed", ok[0], ok[1], bad)
		}
	}
	// integration/bench with the imports the map lists for it (baton
	// serve's, for its serve-* workloads), so that none is unused.
	var benchImports []string
	for e := range m.except {
		if e[0] == "integration/bench" {
			benchImports = append(benchImports, e[1])
		}
	}
	if bad := checkImports(m, map[string][]string{"integration/scale": {"integration/bench"}, "integration/bench": benchImports}); len(bad) != 1 || !strings.Contains(bad[0], "refuses") {
		t.Errorf("checkImports(integration/scale → integration/bench) = %q, want it refused", bad)
	}
	if bad := checkImports(m, map[string][]string{"internal/core": {}, "fencing": {}}); len(bad) != 1 || !strings.Contains(bad[0], "remove it") {
		t.Errorf("a listed exception no one uses: %q, want it reported", bad)
	}
	deps := map[string][]string{
		module + "/mutex":            {module + "/internal/request"},
		module + "/internal/request": {module + "/internal/keys", module + "/rbac"},
		module + "/rbac":             {"sigs.k8s.io/yaml"},
		module + "/semaphore":        {module + "/internal/keys", "go.yaml.in/yaml/v2"},
		module + "/rwmutex":          {module + "/internal/keys"},
	}
	bad := checkLibraryDeps(m, deps)
	want := []string{
		"mutex links " + module + "/rbac: " + module + "/mutex → " + module + "/internal/request → " + module + "/rbac",
		"semaphore links go.yaml.in/yaml/v2: " + module + "/semaphore → go.yaml.in/yaml/v2",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("checkLibraryDeps = %q, want %q", bad, want)
	}
}

// coreLines bounds internal/core, the code every primitive runs through
// (docs/design.md): what only one primitive needs lives with it.
const coreLines = 1600

// TestCoreStaysSmall: internal/core's non-test Go files stay under
// coreLines lines in all.
func TestCoreStaysSmall(t *testing.T) {
	dir := filepath.Join(moduleRoot(t), "internal", "core")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte("\n"))
	}
	if n >= coreLines {
		t.Errorf("internal/core has %d lines of non-test Go, want under %d: move what one primitive alone needs to it", n, coreLines)
	}
	t.Logf("internal/core: %d lines (bound %d)", n, coreLines)
}
