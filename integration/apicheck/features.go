package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// Features returns the exported API of every public package of the Go
// module in dir, one feature a line in the format of Go's api files
// ($GOROOT/api/go1.*.txt, written by cmd/api), sorted. A public package is
// every package of the module that is not a command (package main) and not
// under an internal/, examples/ or testdata/ directory.
//
// The output depends on the source alone: the packages are loaded with
// GOWORK=off, no build tags and cgo off, and a public package with a file
// that a build constraint leaves out is an error, since its API could
// differ from one platform to another.
func Features(dir string) ([]string, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedModule |
			packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir: dir,
		Env: append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("loading the packages of %s: %w", dir, err)
	}
	var public []*packages.Package
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("loading %s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Module == nil {
			return nil, fmt.Errorf("%s: no module", p.PkgPath)
		}
		if isPublic(p.Module.Path, p.PkgPath, p.Name) {
			public = append(public, p)
		}
	}
	if len(public) == 0 {
		return nil, fmt.Errorf("%s: no public packages", dir)
	}
	w := &walker{features: map[string]bool{}}
	for _, p := range public {
		if len(p.IgnoredFiles) > 0 {
			return nil, fmt.Errorf("%s: %s is left out by a build constraint: the API would depend on the platform; keep public packages free of build constraints",
				p.PkgPath, filepath.Base(p.IgnoredFiles[0]))
		}
		if err := w.export(p); err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(w.features))
	for f := range w.features {
		out = append(out, f)
	}
	slices.Sort(out)
	return out, nil
}

// isPublic reports whether package path (named name) of module mod is one
// whose API the record covers.
func isPublic(mod, path, name string) bool {
	if name == "main" {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
	elems := strings.Split(rel, "/")
	if elems[0] == "examples" {
		return false
	}
	return !slices.Contains(elems, "internal") && !slices.Contains(elems, "testdata")
}

// walker emits the features of one package at a time. What follows
// mirrors cmd/api's Walker (src/cmd/api/main_test.go in Go 1.26) so that
// the lines read as Go's own api files do.
type walker struct {
	features   map[string]bool
	scope      []string
	current    *types.Package
	deprecated map[token.Pos]bool
	err        error
}

func (w *walker) export(p *packages.Package) error {
	w.current = p.Types
	w.scope = []string{"pkg " + p.PkgPath}
	w.collectDeprecated(p.Syntax)
	scope := p.Types.Scope()
	for _, name := range scope.Names() {
		if token.IsExported(name) {
			w.emitObj(scope.Lookup(name))
		}
	}
	return w.err
}

func (w *walker) emitf(format string, args ...any) {
	f := strings.Join(w.scope, ", ") + ", " + fmt.Sprintf(format, args...)
	switch {
	case w.err != nil:
	case strings.Contains(f, "\n"):
		w.err = fmt.Errorf("feature contains a newline: %q", f)
	case w.features[f]:
		w.err = fmt.Errorf("duplicate feature: %s", f)
	default:
		w.features[f] = true
	}
}

// pushScope adds name to the prefix of the features emitted until the
// returned function is called.
func (w *walker) pushScope(name string) (pop func()) {
	w.scope = append(w.scope, name)
	return func() { w.scope = w.scope[:len(w.scope)-1] }
}

func (w *walker) emitObj(obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		if w.isDeprecated(obj) {
			w.emitf("const %s //deprecated", obj.Name())
		}
		w.emitf("const %s %s", obj.Name(), w.typeString(obj.Type()))
		x := obj.Val()
		short, exact := x.String(), x.ExactString()
		if short == exact {
			w.emitf("const %s = %s", obj.Name(), short)
		} else {
			w.emitf("const %s = %s  // %s", obj.Name(), short, exact)
		}
	case *types.Var:
		if w.isDeprecated(obj) {
			w.emitf("var %s //deprecated", obj.Name())
		}
		w.emitf("var %s %s", obj.Name(), w.typeString(obj.Type()))
	case *types.TypeName:
		w.emitType(obj)
	case *types.Func:
		if w.isDeprecated(obj) {
			w.emitf("func %s //deprecated", obj.Name())
		}
		w.emitf("func %s%s", obj.Name(), w.signatureString(obj.Signature()))
	default:
		w.err = fmt.Errorf("unknown object %s", obj)
	}
}

func (w *walker) emitType(obj *types.TypeName) {
	name := obj.Name()
	if w.isDeprecated(obj) {
		w.emitf("type %s //deprecated", name)
	}
	typ := obj.Type()
	if obj.IsAlias() {
		w.emitf("type %s = %s", name, w.typeString(typ))
		return
	}
	if tparams := typ.(*types.Named).TypeParams(); tparams != nil {
		var buf bytes.Buffer
		buf.WriteString(name)
		w.writeTypeParams(&buf, tparams, true)
		name = buf.String()
	}
	switch u := typ.Underlying().(type) {
	case *types.Struct:
		w.emitStructType(name, u)
	case *types.Interface:
		w.emitIfaceType(name, u)
		return // its methods are the interface's
	default:
		w.emitf("type %s %s", name, w.typeString(u))
	}

	// The methods of T, then those that only *T has. Both method sets
	// hold the methods promoted from embedded fields: a handle's methods
	// are its API whether it declares them or embeds them.
	seen := map[string]bool{}
	vset := types.NewMethodSet(typ)
	for i := range vset.Len() {
		if m := vset.At(i); m.Obj().Exported() {
			w.emitMethod(m)
			seen[m.Obj().Name()] = true
		}
	}
	pset := types.NewMethodSet(types.NewPointer(typ))
	for i := range pset.Len() {
		if m := pset.At(i); m.Obj().Exported() && !seen[m.Obj().Name()] {
			w.emitMethod(m)
		}
	}
}

func (w *walker) emitStructType(name string, typ *types.Struct) {
	typeStruct := fmt.Sprintf("type %s struct", name)
	w.emitf("%s", typeStruct)
	defer w.pushScope(typeStruct)()
	for i := range typ.NumFields() {
		f := typ.Field(i)
		if !f.Exported() {
			continue
		}
		if f.Anonymous() {
			if w.isDeprecated(f) {
				w.emitf("embedded %s //deprecated", w.typeString(f.Type()))
			}
			w.emitf("embedded %s", w.typeString(f.Type()))
			continue
		}
		if w.isDeprecated(f) {
			w.emitf("%s //deprecated", f.Name())
		}
		w.emitf("%s %s", f.Name(), w.typeString(f.Type()))
	}
}

func (w *walker) emitIfaceType(name string, typ *types.Interface) {
	pop := w.pushScope("type " + name + " interface")
	var names []string
	complete := true
	mset := types.NewMethodSet(typ)
	for i := range mset.Len() {
		m := mset.At(i).Obj().(*types.Func)
		if !m.Exported() {
			complete = false
			continue
		}
		names = append(names, m.Name())
		if w.isDeprecated(m) {
			w.emitf("%s //deprecated", m.Name())
		}
		w.emitf("%s%s", m.Name(), w.signatureString(m.Signature()))
	}
	if !complete {
		// Only this package can implement it, so it may gain methods: record
		// that, rather than the list of its methods.
		w.emitf("unexported methods")
	}
	pop()
	if !complete {
		return
	}
	// Go's api files list a named interface's methods alone, so that a
	// constraint's type set ("~int | ~int64") would change unrecorded: its
	// terms follow the methods here.
	slices.Sort(names)
	names = append(names, w.sortedEmbeddeds(typ)...)
	if len(names) == 0 {
		w.emitf("type %s interface {}", name)
		return
	}
	w.emitf("type %s interface { %s }", name, strings.Join(names, ", "))
}

func (w *walker) emitMethod(m *types.Selection) {
	sig := m.Type().(*types.Signature)
	recv := sig.Recv().Type()
	tps := ""
	if rtp := sig.RecvTypeParams(); rtp != nil {
		var buf bytes.Buffer
		w.writeTypeParams(&buf, rtp, false)
		tps = buf.String()
	}
	if w.isDeprecated(m.Obj()) {
		w.emitf("method (%s%s) %s //deprecated", w.typeString(recv), tps, m.Obj().Name())
	}
	w.emitf("method (%s%s) %s%s", w.typeString(recv), tps, m.Obj().Name(), w.signatureString(sig))
}

func (w *walker) typeString(typ types.Type) string {
	var buf bytes.Buffer
	w.writeType(&buf, typ)
	return buf.String()
}

func (w *walker) signatureString(sig *types.Signature) string {
	var buf bytes.Buffer
	w.writeSignature(&buf, sig)
	return buf.String()
}

func (w *walker) writeType(buf *bytes.Buffer, typ types.Type) {
	switch typ := typ.(type) {
	case *types.Basic:
		s := typ.Name()
		switch typ.Kind() {
		case types.UnsafePointer:
			s = "unsafe.Pointer"
		case types.UntypedBool:
			s = "ideal-bool"
		case types.UntypedInt:
			s = "ideal-int"
		case types.UntypedRune:
			s = "ideal-char" // Go's name, kept from its first api tool
		case types.UntypedFloat:
			s = "ideal-float"
		case types.UntypedComplex:
			s = "ideal-complex"
		case types.UntypedString:
			s = "ideal-string"
		default:
			switch s {
			case "byte":
				s = "uint8"
			case "rune":
				s = "int32"
			}
		}
		buf.WriteString(s)
	case *types.Array:
		fmt.Fprintf(buf, "[%d]", typ.Len())
		w.writeType(buf, typ.Elem())
	case *types.Slice:
		buf.WriteString("[]")
		w.writeType(buf, typ.Elem())
	case *types.Struct:
		buf.WriteString("struct")
	case *types.Pointer:
		buf.WriteByte('*')
		w.writeType(buf, typ.Elem())
	case *types.Signature:
		buf.WriteString("func")
		w.writeSignature(buf, typ)
	case *types.Interface:
		buf.WriteString("interface{")
		if typ.NumMethods() > 0 || typ.NumEmbeddeds() > 0 {
			buf.WriteByte(' ')
		}
		if typ.NumMethods() > 0 {
			buf.WriteString(strings.Join(sortedMethodNames(typ), ", "))
		}
		if typ.NumEmbeddeds() > 0 {
			buf.WriteString(strings.Join(w.sortedEmbeddeds(typ), ", "))
		}
		if typ.NumMethods() > 0 || typ.NumEmbeddeds() > 0 {
			buf.WriteByte(' ')
		}
		buf.WriteString("}")
	case *types.Map:
		buf.WriteString("map[")
		w.writeType(buf, typ.Key())
		buf.WriteByte(']')
		w.writeType(buf, typ.Elem())
	case *types.Chan:
		switch typ.Dir() {
		case types.SendOnly:
			buf.WriteString("chan<- ")
		case types.RecvOnly:
			buf.WriteString("<-chan ")
		default:
			buf.WriteString("chan ")
		}
		w.writeType(buf, typ.Elem())
	case *types.Alias:
		w.writeType(buf, types.Unalias(typ))
	case *types.Named:
		obj := typ.Obj()
		if pkg := obj.Pkg(); pkg != nil && pkg != w.current {
			buf.WriteString(pkg.Name())
			buf.WriteByte('.')
		}
		buf.WriteString(obj.Name())
		if targs := typ.TypeArgs(); targs.Len() > 0 {
			buf.WriteByte('[')
			for i := range targs.Len() {
				if i > 0 {
					buf.WriteString(", ")
				}
				w.writeType(buf, targs.At(i))
			}
			buf.WriteByte(']')
		}
	case *types.TypeParam:
		// A type parameter's name may change without changing the API.
		fmt.Fprintf(buf, "$%d", typ.Index())
	default:
		if w.err == nil {
			w.err = fmt.Errorf("unknown type %T (%v)", typ, typ)
		}
	}
}

func (w *walker) writeSignature(buf *bytes.Buffer, sig *types.Signature) {
	if tparams := sig.TypeParams(); tparams != nil {
		w.writeTypeParams(buf, tparams, true)
	}
	w.writeParams(buf, sig.Params(), sig.Variadic())
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		buf.WriteByte(' ')
		w.writeType(buf, res.At(0).Type())
	default:
		buf.WriteByte(' ')
		w.writeParams(buf, res, false)
	}
}

func (w *walker) writeTypeParams(buf *bytes.Buffer, tparams *types.TypeParamList, withConstraints bool) {
	buf.WriteByte('[')
	for i := range tparams.Len() {
		if i > 0 {
			buf.WriteString(", ")
		}
		tp := tparams.At(i)
		w.writeType(buf, tp)
		if withConstraints {
			buf.WriteByte(' ')
			w.writeType(buf, tp.Constraint())
		}
	}
	buf.WriteByte(']')
}

func (w *walker) writeParams(buf *bytes.Buffer, t *types.Tuple, variadic bool) {
	buf.WriteByte('(')
	for i, n := 0, t.Len(); i < n; i++ {
		if i > 0 {
			buf.WriteString(", ")
		}
		typ := t.At(i).Type()
		if variadic && i+1 == n {
			buf.WriteString("...")
			typ = typ.(*types.Slice).Elem()
		}
		w.writeType(buf, typ)
	}
	buf.WriteByte(')')
}

func sortedMethodNames(typ *types.Interface) []string {
	list := make([]string, typ.NumMethods())
	for i := range list {
		list[i] = typ.Method(i).Name()
	}
	slices.Sort(list)
	return list
}

// sortedEmbeddeds returns the constraint terms embedded in an interface
// (not its embedded interfaces' methods, which its method set holds).
func (w *walker) sortedEmbeddeds(typ *types.Interface) []string {
	var list []string
	for i := range typ.NumEmbeddeds() {
		switch emb := typ.EmbeddedType(i).(type) {
		case *types.Interface:
			list = append(list, w.sortedEmbeddeds(emb)...)
		case *types.Union:
			var buf bytes.Buffer
			for j := range emb.Len() {
				if j > 0 {
					buf.WriteString(" | ")
				}
				term := emb.Term(j)
				if term.Tilde() {
					buf.WriteByte('~')
				}
				w.writeType(&buf, term.Type())
			}
			list = append(list, buf.String())
		}
	}
	slices.Sort(list)
	return list
}

// collectDeprecated marks the declarations whose doc comment has a
// "Deprecated:" paragraph: deprecating a feature is recorded as a feature
// of its own ("func F //deprecated"), as Go records it.
func (w *walker) collectDeprecated(files []*ast.File) {
	isDeprecated := func(doc *ast.CommentGroup) bool {
		if doc != nil {
			for _, c := range doc.List {
				if strings.HasPrefix(c.Text, "// Deprecated:") {
					return true
				}
			}
		}
		return false
	}
	w.deprecated = map[token.Pos]bool{}
	mark := func(id *ast.Ident) {
		if id != nil {
			w.deprecated[id.Pos()] = true
		}
	}
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.File:
				if isDeprecated(n.Doc) {
					mark(n.Name)
				}
				return true
			case *ast.GenDecl:
				if isDeprecated(n.Doc) {
					for _, spec := range n.Specs {
						switch spec := spec.(type) {
						case *ast.ValueSpec:
							for _, id := range spec.Names {
								mark(id)
							}
						case *ast.TypeSpec:
							mark(spec.Name)
						}
					}
				}
				return true
			case *ast.FuncDecl:
				if isDeprecated(n.Doc) {
					mark(n.Name)
				}
				return false
			case *ast.TypeSpec:
				if isDeprecated(n.Doc) {
					mark(n.Name)
				}
				return true
			case *ast.StructType, *ast.InterfaceType, *ast.FieldList:
				return true
			case *ast.ValueSpec:
				if isDeprecated(n.Doc) {
					for _, id := range n.Names {
						mark(id)
					}
				}
				return false
			case *ast.Field:
				if isDeprecated(n.Doc) {
					for _, id := range n.Names {
						mark(id)
					}
					if len(n.Names) == 0 {
						typ := n.Type
						if ptr, ok := typ.(*ast.StarExpr); ok {
							typ = ptr.X
						}
						if id, ok := typ.(*ast.Ident); ok {
							mark(id)
						}
					}
				}
				return false
			default:
				return false
			}
		})
	}
}

func (w *walker) isDeprecated(obj types.Object) bool {
	return w.deprecated[obj.Pos()]
}
