package repl

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/forgeml/forge/repl/symbols"
)

// doc prints the documentation of a meta-command (?:run), a package
// member (?forge.Randn, ?train.Config) or a value and its members (?model,
// ?model.Generate): the signature or type, its doc comment when the
// library's source is at hand, and the fields and methods.
func (s *Session) doc(name string) error {
	switch {
	case name == "":
		fmt.Fprintln(s.stdout, "?name documents a command (?:run), a package member (?forge.Randn) or a value (?model, ?tr.Step)")
		return nil
	case strings.HasPrefix(name, ":"):
		c, err := findCommand(name[1:])
		if err != nil {
			return err
		}
		return cmdHelp(s, nil, []string{c.name})
	}
	if !isSelector(name) {
		return fmt.Errorf("?%s: give a name such as forge.Randn, model or tr.Step", name)
	}
	pkg, member, hasDot := strings.Cut(name, ".")
	if path, ok := packages[pkg]; ok {
		if !hasDot {
			fmt.Fprintf(s.stdout, "package %s (%s): %s\n", pkg, path, strings.Join(packageMembers(path), " "))
			return nil
		}
		sym, ok := symbols.Symbols[path+"/"+pkg][member]
		if !ok || strings.Contains(member, ".") {
			return s.docValue(name)
		}
		t := sym.Type()
		if t.Kind() == reflect.Pointer && sym.IsNil() { // a type
			t = t.Elem()
			fmt.Fprintf(s.stdout, "type %s.%s %s\n", pkg, member, kindOf(t))
			s.printDoc(path, member, "")
			s.printMembers(t)
			return nil
		}
		fmt.Fprintf(s.stdout, "%s.%s %s\n", pkg, member, signature(t))
		s.printDoc(path, member, "")
		return nil
	}
	return s.docValue(name)
}

// docValue documents a value the interpreter knows (a selector chain with
// no calls, so looking has no side effects).
func (s *Session) docValue(name string) error {
	g, err := s.interp()
	if err != nil {
		return err
	}
	if err := g.undefined(name); err != nil {
		return fmt.Errorf("?%s: %v", name, err)
	}
	v, err := g.i.Eval(name)
	if err != nil {
		return fmt.Errorf("?%s: %v", name, goError(err, contextBackground))
	}
	x := valueOf(v)
	if x == nil {
		if v.IsValid() {
			fmt.Fprintf(s.stdout, "%s: %s (nil)\n", name, v.Type())
		} else {
			fmt.Fprintf(s.stdout, "%s: nil\n", name)
		}
		return nil
	}
	rv := reflect.ValueOf(x)
	t := rv.Type()
	if t.Kind() == reflect.Func {
		fmt.Fprintf(s.stdout, "%s %s\n", name, signature(t))
		// A method value: find the receiver's type for the doc comment.
		if i := strings.LastIndex(name, "."); i > 0 {
			if rv, err := g.i.Eval(name[:i]); err == nil {
				if rx := valueOf(rv); rx != nil {
					rt := reflect.TypeOf(rx)
					for rt.Kind() == reflect.Pointer {
						rt = rt.Elem()
					}
					s.printDoc(rt.PkgPath(), rt.Name(), name[i+1:])
				}
			}
		}
		return nil
	}
	fmt.Fprintf(s.stdout, "%s: %s\n", name, t)
	et := t
	for et.Kind() == reflect.Pointer {
		et = et.Elem()
	}
	if et.PkgPath() != "" {
		s.printDoc(et.PkgPath(), et.Name(), "")
	}
	s.printMembers(t)
	return nil
}

func isSelector(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if !token.IsIdentifier(part) {
			return false
		}
	}
	return true
}

func kindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		return "struct"
	case reflect.Interface:
		return "interface"
	}
	return t.String()
}

// signature is a func type without the "func" keyword's noise.
func signature(t reflect.Type) string {
	if t.Kind() != reflect.Func {
		return t.String()
	}
	return strings.TrimPrefix(t.String(), "func")
}

// printMembers lists the exported fields and methods of t (and *t).
func (s *Session) printMembers(t reflect.Type) {
	fields, methods := members(t)
	if len(fields) > 0 {
		fmt.Fprintf(s.stdout, "  fields:  %s\n", wrap(fields, s.width()-11, "           "))
	}
	if len(methods) > 0 {
		fmt.Fprintf(s.stdout, "  methods: %s\n", wrap(methods, s.width()-11, "           "))
	}
}

// members returns the exported field and method names of t, a pointer to
// t and what t points to.
func members(t reflect.Type) (fields, methods []string) {
	seen := map[string]bool{}
	add := func(list *[]string, n string) {
		if !seen[n] && token.IsExported(n) {
			seen[n] = true
			*list = append(*list, n)
		}
	}
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	if base.Kind() == reflect.Struct {
		for i := range base.NumField() {
			add(&fields, base.Field(i).Name)
		}
	}
	for _, mt := range []reflect.Type{t, base, reflect.PointerTo(base)} {
		for i := range mt.NumMethod() {
			add(&methods, mt.Method(i).Name)
		}
	}
	sort.Strings(methods)
	return fields, methods
}

func wrap(words []string, width int, indent string) string {
	var b strings.Builder
	col := 0
	for i, w := range words {
		if i > 0 {
			if col+1+len(w) > width {
				b.WriteString("\n" + indent)
				col = 0
			} else {
				b.WriteByte(' ')
				col++
			}
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

func packageMembers(path string) []string {
	var out []string
	for k := range symbols.Symbols[path+"/"+filepath.Base(path)] {
		if token.IsExported(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// printDoc prints the doc comment of name (or of its method) in the
// package at path, read from the library's source when it is on this
// machine (a clone or the module cache); nothing otherwise.
func (s *Session) printDoc(path, name, method string) {
	p := packageDoc(path)
	if p == nil {
		return
	}
	text := ""
	for _, f := range p.Funcs {
		if f.Name == name && method == "" {
			text = f.Doc
		}
	}
	for _, t := range p.Types {
		for _, f := range t.Funcs {
			if f.Name == name && method == "" {
				text = f.Doc
			}
		}
		if t.Name != name {
			continue
		}
		if method == "" {
			text = t.Doc
		}
		for _, m := range t.Methods {
			if m.Name == method {
				text = m.Doc
			}
		}
	}
	for _, vs := range append(p.Vars, p.Consts...) {
		for _, n := range vs.Names {
			if n == name && method == "" {
				text = vs.Doc
			}
		}
	}
	if text = strings.TrimSpace(text); text != "" {
		fmt.Fprintf(s.stdout, "  %s\n", strings.ReplaceAll(text, "\n", "\n  "))
	}
}

var (
	docMu    sync.Mutex
	docCache = map[string]*doc.Package{}
)

// packageDoc parses the package's source, found through the file a
// compiled function of it was built from.
func packageDoc(path string) *doc.Package {
	docMu.Lock()
	defer docMu.Unlock()
	if p, ok := docCache[path]; ok {
		return p
	}
	docCache[path] = nil
	var dir string
	for _, v := range symbols.Symbols[path+"/"+filepath.Base(path)] {
		if v.Kind() == reflect.Func {
			if f := runtime.FuncForPC(v.Pointer()); f != nil {
				file, _ := f.FileLine(f.Entry())
				dir = filepath.Dir(file)
				break
			}
		}
	}
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return nil
	}
	for _, pk := range pkgs {
		files := make([]*ast.File, 0, len(pk.Files))
		for _, f := range pk.Files {
			files = append(files, f)
		}
		if p, err := doc.NewFromFiles(fset, files, path); err == nil {
			docCache[path] = p
			return p
		}
	}
	return nil
}
