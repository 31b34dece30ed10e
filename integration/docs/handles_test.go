package docs_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A handle is an exported type of a library package with a field of type
// internal/core.Hold: a mutex's Lock, an election's Term. go doc lists only
// the methods a type declares, so every method of a handle is declared on
// it, with a doc comment, never reached only through an embedded field.

// wantHandles are handles findHandles must find, so that the check cannot
// pass by finding none.
var wantHandles = []string{"election.Term", "mutex.Lock", "rwmutex.Lock", "semaphore.Permit", "shard.Shard"}

// TestHandlesDeclareTheirMethods: go doc of every handle lists each of its
// methods, with a doc comment.
func TestHandlesDeclareTheirMethods(t *testing.T) {
	ix := newSrcIndex(t, libraryRoot(t))
	handles, err := ix.findHandles()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, h := range handles {
		found = append(found, h.String())
	}
	for _, w := range wantHandles {
		if !slices.Contains(found, w) {
			t.Errorf("handle %s not found (found %q): does it still hold a core.Hold?", w, found)
		}
	}
	for _, h := range handles {
		problems, err := ix.checkHandle(h)
		if err != nil {
			t.Errorf("%s: %v", h, err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
	t.Logf("handles checked: %s", strings.Join(found, " "))
}

// TestHandleCheckFails: the check refuses, on a made-up module, a method
// promoted from an embedded field (of the same package, of another through
// an alias, and one level further down) and a method without a doc comment.
func TestHandleCheckFails(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("internal/core/hold.go", `package core

type Hold struct{ Inner }

// Token is declared.
func (h *Hold) Token() int { return 0 }

// Key is declared.
func (h *Hold) Key() string { return "" }

func (h *Hold) unexported() {}

type Inner struct{}

// Deep is promoted from one level further down.
func (Inner) Deep() {}
`)
	write("good/good.go", `package good

import "example.com/m/internal/core"

// Good declares every method.
type Good struct{ hold *core.Hold }

// Token forwards.
func (g *Good) Token() int { return g.hold.Token() }

// Key forwards.
func (g *Good) Key() string { return g.hold.Key() }
`)
	write("bad/bad.go", `package bad

import (
	c "example.com/m/internal/core"
)

type hold = c.Hold

// Aliased embeds the core's type through an alias.
type Aliased struct {
	*hold
}

// Key is declared.
func (a *Aliased) Key() string { return "" }

func (a *Aliased) Undocumented() {}

type local struct{}

// Local is promoted from a local embedded type.
func (local) Local() {}

// Same embeds a type of its own package.
type Same struct {
	local
	h *c.Hold
}
`)
	ix := newSrcIndex(t, root)
	handles, err := ix.findHandles()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, h := range handles {
		problems, err := ix.checkHandle(h)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		got[h.String()] = problems
	}
	want := map[string][]string{
		"bad.Aliased": {
			"bad.Aliased: method Deep is reachable only through an embedded field: declare it on bad.Aliased",
			"bad.Aliased: method Token is reachable only through an embedded field: declare it on bad.Aliased",
			"bad.Aliased: method Undocumented has no doc comment",
		},
		"bad.Same": {
			"bad.Same: method Local is reachable only through an embedded field: declare it on bad.Same",
		},
		"good.Good": nil,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("problems = %q\nwant %q", got, want)
	}
}

// libraryRoot is the directory of the library's go.mod: the nearest one
// up from here that has package mutex beside it.
func libraryRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, errMod := os.Stat(filepath.Join(dir, "go.mod"))
		_, errMutex := os.Stat(filepath.Join(dir, "mutex", "doc.go"))
		if errMod == nil && errMutex == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("library root not found: no go.mod beside mutex/ above the test's directory")
		}
		dir = up
	}
}

var moduleRE = regexp.MustCompile(`(?m)^module\s+(\S+)`)

// srcIndex parses the packages of one module on demand.
type srcIndex struct {
	t    *testing.T
	root string
	mod  string
	fset *token.FileSet
	pkgs map[string]*srcPkg // by import path
}

// srcPkg is one package's non-test files, as the default build sees them.
type srcPkg struct {
	path  string
	name  string
	doc   *doc.Package
	specs map[string]*ast.TypeSpec // every top-level type, by name
	files map[string]*ast.File     // the file declaring each of specs
}

// typeRef names a type by its package's import path.
type typeRef struct {
	pkg  *srcPkg
	name string
}

func (r typeRef) String() string { return r.pkg.name + "." + r.name }

func newSrcIndex(t *testing.T, root string) *srcIndex {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := moduleRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no module line", filepath.Join(root, "go.mod"))
	}
	return &srcIndex{t: t, root: root, mod: string(m[1]), fset: token.NewFileSet(), pkgs: map[string]*srcPkg{}}
}

// load parses the package at import path p of the module; nil if it has
// no Go files.
func (ix *srcIndex) load(p string) (*srcPkg, error) {
	if pkg, ok := ix.pkgs[p]; ok {
		return pkg, nil
	}
	rel, ok := strings.CutPrefix(p, ix.mod)
	if !ok || (rel != "" && rel[0] != '/') {
		return nil, fmt.Errorf("package %s is outside module %s: its methods cannot be checked here", p, ix.mod)
	}
	dir := filepath.Join(ix.root, filepath.FromSlash(rel))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, n); err != nil || !ok {
			continue // another build's file (a planted bug's, another OS's)
		}
		f, err := parser.ParseFile(ix.fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		ix.pkgs[p] = nil
		return nil, nil
	}
	pkg := &srcPkg{path: p, name: files[0].Name.Name, specs: map[string]*ast.TypeSpec{}, files: map[string]*ast.File{}}
	for _, f := range files {
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
				for _, s := range gd.Specs {
					ts := s.(*ast.TypeSpec)
					pkg.specs[ts.Name.Name], pkg.files[ts.Name.Name] = ts, f
				}
			}
		}
	}
	// AllMethods: a type's methods include those promoted from the fields
	// it embeds, when they are of its own package.
	pkg.doc, err = doc.NewFromFiles(ix.fset, files, p, doc.AllDecls|doc.AllMethods)
	if err != nil {
		return nil, err
	}
	ix.pkgs[p] = pkg
	return pkg, nil
}

// resolve names the type expression e of a field or alias declared in
// file f of pkg, through pointers, type arguments and aliases.
func (ix *srcIndex) resolve(pkg *srcPkg, f *ast.File, e ast.Expr) (typeRef, error) {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
			continue
		case *ast.ParenExpr:
			e = x.X
			continue
		case *ast.IndexExpr:
			e = x.X
			continue
		case *ast.IndexListExpr:
			e = x.X
			continue
		case *ast.Ident:
			ts, ok := pkg.specs[x.Name]
			if !ok {
				return typeRef{}, fmt.Errorf("type %s not declared in %s (a predeclared type?)", x.Name, pkg.path)
			}
			if ts.Assign.IsValid() { // an alias: what it names
				return ix.resolve(pkg, pkg.files[x.Name], ts.Type)
			}
			return typeRef{pkg, x.Name}, nil
		case *ast.SelectorExpr:
			q, ok := x.X.(*ast.Ident)
			if !ok {
				return typeRef{}, fmt.Errorf("unexpected type expression %T", x.X)
			}
			to, err := ix.imported(f, q.Name)
			if err != nil {
				return typeRef{}, err
			}
			return ix.resolve(to, nil, ast.NewIdent(x.Sel.Name))
		default:
			return typeRef{}, fmt.Errorf("unexpected type expression %T", e)
		}
	}
}

// imported is the package that file f imports as name.
func (ix *srcIndex) imported(f *ast.File, name string) (*srcPkg, error) {
	for _, is := range f.Imports {
		p, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			return nil, err
		}
		if is.Name != nil && is.Name.Name != name {
			continue
		}
		if is.Name == nil && path.Base(p) != name && !strings.HasPrefix(p, ix.mod+"/") {
			continue // an outside package named otherwise
		}
		pkg, err := ix.load(p)
		if err != nil {
			return nil, err
		}
		if pkg != nil && (is.Name != nil || pkg.name == name) {
			return pkg, nil
		}
	}
	return nil, fmt.Errorf("%s: no import named %s", ix.fset.Position(f.Pos()).Filename, name)
}

// docType is r's go/doc entry.
func docType(r typeRef) *doc.Type {
	for _, dt := range r.pkg.doc.Types {
		if dt.Name == r.name {
			return dt
		}
	}
	return nil
}

// methodSet collects into set the exported methods of r's method set,
// each with true if r declares it itself.
func (ix *srcIndex) methodSet(r typeRef, set map[string]bool, seen map[typeRef]bool) error {
	if seen[r] {
		return nil
	}
	seen[r] = true
	dt := docType(r)
	if dt == nil {
		return fmt.Errorf("%s: no documentation of the type", r)
	}
	for _, m := range dt.Methods {
		if token.IsExported(m.Name) {
			set[m.Name] = set[m.Name] || m.Level == 0
		}
	}
	st, ok := r.pkg.specs[r.name].Type.(*ast.StructType)
	if !ok {
		return nil
	}
	for _, fld := range st.Fields.List {
		if len(fld.Names) > 0 {
			continue
		}
		emb, err := ix.resolve(r.pkg, r.pkg.files[r.name], fld.Type)
		if err != nil {
			return fmt.Errorf("%s: embedded field: %w", r, err)
		}
		promoted := map[string]bool{}
		if err := ix.methodSet(emb, promoted, seen); err != nil {
			return err
		}
		for name := range promoted {
			set[name] = set[name] || false // promoted: declared by emb, not r
		}
	}
	return nil
}

// findHandles returns the handles of the module's library packages: not
// internal, cmd, integration or examples.
func (ix *srcIndex) findHandles() ([]typeRef, error) {
	hold, err := ix.load(ix.mod + "/internal/core")
	if err != nil || hold == nil {
		return nil, fmt.Errorf("internal/core: %v", err)
	}
	holdRef := typeRef{hold, "Hold"}
	var handles []typeRef
	err = filepath.WalkDir(ix.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(ix.root, p)
		rel = filepath.ToSlash(rel)
		switch base := d.Name(); {
		case p == ix.root:
		case strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata" || base == "internal":
			return filepath.SkipDir
		case rel == "cmd" || rel == "integration" || rel == "examples":
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != ix.root {
			return filepath.SkipDir // another module
		}
		ip := ix.mod
		if rel != "." {
			ip += "/" + rel
		}
		pkg, err := ix.load(ip)
		if err != nil || pkg == nil {
			return err
		}
		for _, dt := range pkg.doc.Types {
			st, ok := pkg.specs[dt.Name].Type.(*ast.StructType)
			if !ok || !token.IsExported(dt.Name) {
				continue
			}
			for _, fld := range st.Fields.List {
				if r, err := ix.resolve(pkg, pkg.files[dt.Name], fld.Type); err == nil && r == holdRef {
					handles = append(handles, typeRef{pkg, dt.Name})
					break
				}
			}
		}
		return nil
	})
	slices.SortFunc(handles, func(a, b typeRef) int { return strings.Compare(a.String(), b.String()) })
	return handles, err
}

// checkHandle returns h's exported methods that only an embedded field
// brings, and those it declares without a doc comment.
func (ix *srcIndex) checkHandle(h typeRef) ([]string, error) {
	set := map[string]bool{}
	if err := ix.methodSet(h, set, map[typeRef]bool{}); err != nil {
		return nil, err
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if !set[name] {
			problems = append(problems, fmt.Sprintf("%s: method %s is reachable only through an embedded field: declare it on %s", h, name, h))
		}
	}
	for _, m := range docType(h).Methods {
		if m.Level == 0 && token.IsExported(m.Name) && strings.TrimSpace(m.Doc) == "" {
			problems = append(problems, fmt.Sprintf("%s: method %s has no doc comment", h, m.Name))
		}
	}
	return problems, nil
}
