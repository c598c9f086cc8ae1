package repl

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/forgeml/forge/repl/symbols"
)

// The interpreter reports a name that nothing declares in its own terms
// (`constant definition loop`, a CFG panic) and, worse, keeps it
// half-declared afterwards, so the session resolves the input's names
// itself before it hands the input over: against the input's own
// declarations and scopes, the names the session's code declared in the
// interpreter (goEval.names), the imported packages' symbols and Go's
// predeclared names.

// undefinedError is the error of a name nothing declares.
type undefinedError struct {
	name string // "froge" or "forge.Randnn"
	near string // the nearest known name, or ""
	typ  string // for x.name: the type of x, which has no such member
	msg  string // the whole message, for another misuse of a name
}

func (e undefinedError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	if e.typ != "" {
		msg := e.name + " undefined (type " + e.typ + " has no field or method " + e.name[strings.LastIndexByte(e.name, '.')+1:]
		if e.near != "" {
			msg += "; did you mean " + e.near + "?"
		}
		return msg + ")"
	}
	if e.name == "ans" {
		return "undefined: ans (it holds the value of the last expression; there is none yet)"
	}
	if e.near != "" {
		return "undefined: " + e.name + " (did you mean " + e.near + "?)"
	}
	return "undefined: " + e.name
}

// universe holds Go's predeclared names (types, constants, builtins).
var universe = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range types.Universe.Names() {
		m[n] = true
	}
	return m
}()

// sessionNames are the names every session binds.
var sessionNames = []string{"model", "tr", "run", "ctx", "bind"}

// knows reports whether the interpreter's top level declares name.
func (g *goEval) knows(name string) bool {
	if universe[name] || g.names[name] || strings.HasPrefix(name, "__") || name == "_" {
		return true
	}
	if _, ok := packages[name]; ok {
		return true
	}
	for _, n := range sessionNames {
		if n == name {
			return true
		}
	}
	return name == "ans" && g.hasAns
}

// topNames lists the top-level names the interpreter knows, for suggestions.
func (g *goEval) topNames() []string {
	out := append([]string{}, sessionNames...)
	out = append(out, sortedKeys(packages)...)
	out = append(out, sortedKeys(g.names)...)
	for n := range universe {
		out = append(out, n)
	}
	if g.hasAns {
		out = append(out, "ans")
	}
	return out
}

// undefined returns the first name of src (Go the user typed; extra are
// names the evaluation binds around it) that nothing declares, or nil.
func (g *goEval) undefined(src string, extra ...string) error {
	r := &resolver{g: g, scopes: []map[string]bool{{}}}
	for _, n := range extra {
		r.declare(n)
	}
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", "package p\n"+src, 0); err == nil {
		r.file(f)
	} else if f, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}", 0); err == nil {
		r.stmts(f.Decls[0].(*ast.FuncDecl).Body.List)
	} else {
		return nil
	}
	if r.bad == "" {
		return nil
	}
	near := nearest(r.bad, r.cands)
	if r.typ != "" {
		near = nearest(r.bad[strings.LastIndexByte(r.bad, '.')+1:], r.cands)
	}
	return undefinedError{r.bad, near, r.typ, r.msg}
}

// resolver walks Go source with its scopes, stopping at the first name
// that resolves to nothing.
type resolver struct {
	g      *goEval
	scopes []map[string]bool // innermost last
	bad    string
	cands  []string // the names that were in scope of bad
	typ    string   // bad is a selector: the operand's type
	msg    string   // the message, when bad is misused rather than undefined
}

func (r *resolver) push()               { r.scopes = append(r.scopes, map[string]bool{}) }
func (r *resolver) pop()                { r.scopes = r.scopes[:len(r.scopes)-1] }
func (r *resolver) declare(name string) { r.scopes[len(r.scopes)-1][name] = true }
func (r *resolver) declareId(e ast.Expr) { // an identifier being declared (others are ignored)
	if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
		r.declare(id.Name)
	}
}

func (r *resolver) local(name string) bool {
	for i := len(r.scopes) - 1; i >= 0; i-- {
		if r.scopes[i][name] {
			return true
		}
	}
	return false
}

// use checks a name used in an expression. (The interpreter itself cannot
// be asked: a failed input leaves the names it used half-declared, and
// evaluating one then gives a stale value.)
func (r *resolver) use(name string) {
	if r.bad != "" || r.local(name) || r.g.knows(name) {
		return
	}
	r.bad = name
	r.cands = r.g.topNames()
	for _, sc := range r.scopes {
		r.cands = append(r.cands, sortedKeys(sc)...)
	}
}

// member checks pkg.name against the package's symbols.
func (r *resolver) member(pkg, name string) {
	path := packages[pkg]
	syms := symbols.Symbols[path+"/"+filepath.Base(path)]
	if r.bad != "" || syms == nil {
		return
	}
	if _, ok := syms[name]; ok {
		return
	}
	r.bad = pkg + "." + name
	for _, m := range packageMembers(path) {
		r.cands = append(r.cands, pkg+"."+m)
	}
}

func (r *resolver) file(f *ast.File) {
	// Top-level declarations see each other in any order.
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				r.declare(d.Name.Name)
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						r.declareId(n)
					}
				case *ast.TypeSpec:
					r.declare(sp.Name.Name)
				}
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			r.push()
			r.params(d.Recv)
			if d.Type.TypeParams != nil {
				r.params(d.Type.TypeParams)
			}
			r.params(d.Type.Params)
			r.params(d.Type.Results)
			if d.Body != nil {
				r.stmts(d.Body.List)
			}
			r.pop()
		case *ast.GenDecl:
			r.genDecl(d)
		}
	}
}

// params resolves a field list's types and declares its names.
func (r *resolver) params(fl *ast.FieldList) {
	if fl == nil {
		return
	}
	for _, f := range fl.List {
		r.expr(f.Type)
	}
	for _, f := range fl.List {
		for _, n := range f.Names {
			r.declareId(n)
		}
	}
}

func (r *resolver) genDecl(d *ast.GenDecl) {
	for _, sp := range d.Specs {
		switch sp := sp.(type) {
		case *ast.ValueSpec:
			r.expr(sp.Type)
			for _, v := range sp.Values {
				r.expr(v)
			}
			for _, n := range sp.Names {
				r.declareId(n)
			}
		case *ast.TypeSpec:
			r.declare(sp.Name.Name)
			if sp.TypeParams != nil {
				r.params(sp.TypeParams)
			}
			r.expr(sp.Type)
		case *ast.ImportSpec:
			name := strings.Trim(sp.Path.Value, "\"`")
			name = name[strings.LastIndexByte(name, '/')+1:]
			if sp.Name != nil {
				name = sp.Name.Name
			}
			r.declare(name)
		}
	}
}

func (r *resolver) stmts(list []ast.Stmt) {
	for _, s := range list {
		r.stmt(s)
	}
}

func (r *resolver) stmt(s ast.Stmt) {
	if r.bad != "" || s == nil {
		return
	}
	switch s := s.(type) {
	case *ast.BlockStmt:
		r.push()
		r.stmts(s.List)
		r.pop()
	case *ast.AssignStmt:
		for _, e := range s.Rhs {
			r.expr(e)
		}
		for _, e := range s.Lhs {
			if s.Tok == token.DEFINE {
				r.declareId(e)
			} else {
				r.expr(e)
			}
		}
	case *ast.DeclStmt:
		if d, ok := s.Decl.(*ast.GenDecl); ok {
			r.genDecl(d)
		}
	case *ast.ExprStmt:
		r.expr(s.X)
	case *ast.GoStmt:
		r.expr(s.Call)
	case *ast.DeferStmt:
		r.expr(s.Call)
	case *ast.ReturnStmt:
		for _, e := range s.Results {
			r.expr(e)
		}
	case *ast.IncDecStmt:
		r.expr(s.X)
	case *ast.SendStmt:
		r.expr(s.Chan)
		r.expr(s.Value)
	case *ast.LabeledStmt:
		r.stmt(s.Stmt)
	case *ast.IfStmt:
		r.push()
		r.stmt(s.Init)
		r.expr(s.Cond)
		r.stmt(s.Body)
		r.stmt(s.Else)
		r.pop()
	case *ast.ForStmt:
		r.push()
		r.stmt(s.Init)
		r.expr(s.Cond)
		r.stmt(s.Post)
		r.stmt(s.Body)
		r.pop()
	case *ast.RangeStmt:
		r.expr(s.X)
		r.push()
		for _, e := range []ast.Expr{s.Key, s.Value} {
			if s.Tok == token.DEFINE {
				r.declareId(e)
			} else {
				r.expr(e)
			}
		}
		r.stmt(s.Body)
		r.pop()
	case *ast.SwitchStmt:
		r.push()
		r.stmt(s.Init)
		r.expr(s.Tag)
		for _, c := range s.Body.List {
			c := c.(*ast.CaseClause)
			for _, e := range c.List {
				r.expr(e)
			}
			r.push()
			r.stmts(c.Body)
			r.pop()
		}
		r.pop()
	case *ast.TypeSwitchStmt:
		r.push()
		r.stmt(s.Init)
		bound := ""
		switch a := s.Assign.(type) {
		case *ast.AssignStmt:
			for _, e := range a.Rhs {
				r.expr(e)
			}
			if id, ok := a.Lhs[0].(*ast.Ident); ok {
				bound = id.Name
			}
		case *ast.ExprStmt:
			r.expr(a.X)
		}
		for _, c := range s.Body.List {
			c := c.(*ast.CaseClause)
			for _, e := range c.List {
				r.expr(e)
			}
			r.push()
			if bound != "" {
				r.declare(bound)
			}
			r.stmts(c.Body)
			r.pop()
		}
		r.pop()
	case *ast.SelectStmt:
		for _, c := range s.Body.List {
			c := c.(*ast.CommClause)
			r.push()
			r.stmt(c.Comm)
			r.stmts(c.Body)
			r.pop()
		}
	}
}

func (r *resolver) expr(e ast.Expr) {
	if e == nil {
		return
	}
	ast.Inspect(e, func(n ast.Node) bool {
		if r.bad != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.Ident:
			r.use(n.Name)
		case *ast.SelectorExpr:
			// Only the operand is a name to resolve; pkg.Member is
			// checked against the package's symbols.
			if id, ok := n.X.(*ast.Ident); ok && !r.local(id.Name) && !r.g.names[id.Name] {
				if _, ok := packages[id.Name]; ok {
					r.member(id.Name, n.Sel.Name)
					return false
				}
			}
			r.expr(n.X)
			if t := r.typeOf(n.X); r.bad == "" && t != nil && !hasMember(t, n.Sel.Name) {
				r.bad, r.typ = types.ExprString(n), t.String()
				f, m := members(t)
				r.cands = append(f, m...)
			}
			return false
		case *ast.CallExpr:
			r.expr(n.Fun)
			if t := r.typeOf(n.Fun); r.bad == "" && t != nil && t.Kind() != reflect.Func {
				r.bad = types.ExprString(n.Fun)
				r.msg = "invalid operation: cannot call non-function " + r.bad + " (of type " + t.String() + ")"
			}
			for _, a := range n.Args {
				r.expr(a)
			}
			return false
		case *ast.FuncLit:
			r.push()
			r.params(n.Type.Params)
			r.params(n.Type.Results)
			r.stmts(n.Body.List)
			r.pop()
			return false
		case *ast.CompositeLit:
			r.expr(n.Type)
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if _, field := kv.Key.(*ast.Ident); !field { // a bare key may be a field name
						r.expr(kv.Key)
					}
					r.expr(kv.Value)
				} else {
					r.expr(el)
				}
			}
			return false
		case *ast.StructType:
			for _, f := range n.Fields.List {
				r.expr(f.Type)
			}
			return false
		case *ast.InterfaceType:
			for _, m := range n.Methods.List {
				if ft, ok := m.Type.(*ast.FuncType); ok {
					r.expr(ft)
				} else {
					r.expr(m.Type)
				}
			}
			return false
		case *ast.FuncType:
			for _, fl := range []*ast.FieldList{n.TypeParams, n.Params, n.Results} {
				if fl != nil {
					for _, f := range fl.List {
						r.expr(f.Type)
					}
				}
			}
			return false
		}
		return true
	})
}

// nearest returns the candidate closest to name in spelling (letter case
// ignored), if one is close enough to be a likely typo.
func nearest(name string, cands []string) string {
	if len(name) < 3 {
		return "" // any name is a typo away from a short one
	}
	limit := 1
	switch n := len(name); {
	case n >= 9:
		limit = 3
	case n >= 5:
		limit = 2
	}
	best, bestD := "", limit+1
	sort.Strings(cands)
	for _, c := range cands {
		if c == name || strings.HasPrefix(c, "__") {
			continue
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of neighbours cost one each.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// typeOf is the static type of e where it is plain from the compiled
// packages' symbols and the session's values (nil otherwise): a package
// member, a session variable, a field or method of a typed operand, the
// first result of a call. Types declared in the interpreter are left
// alone (their methods are not visible through reflection).
func (r *resolver) typeOf(e ast.Expr) reflect.Type {
	var t reflect.Type
	switch e := e.(type) {
	case *ast.ParenExpr:
		return r.typeOf(e.X)
	case *ast.Ident:
		if r.local(e.Name) || !r.g.values[e.Name] {
			return nil // (model, tr, run and ctx are values the binding declared)
		}
		v, err := r.g.i.Eval(e.Name)
		if err != nil || !v.IsValid() {
			return nil
		}
		if x := valueOf(v); x != nil {
			t = reflect.TypeOf(x)
		} else {
			t = v.Type()
		}
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok && !r.local(id.Name) && !r.g.names[id.Name] {
			if path, ok := packages[id.Name]; ok {
				sym, ok := symbols.Symbols[path+"/"+filepath.Base(path)][e.Sel.Name]
				switch {
				case !ok || sym.Kind() == reflect.Pointer && sym.IsNil(): // a type
					return nil
				case sym.Kind() == reflect.Func:
					t = sym.Type()
				case sym.Kind() == reflect.Pointer: // a variable
					t = sym.Type().Elem()
				default: // a constant
					return nil
				}
				break
			}
		}
		xt := r.typeOf(e.X)
		if xt == nil {
			return nil
		}
		if m, ok := methodOf(xt, e.Sel.Name); ok {
			t = m
		} else if st := deref(xt); st.Kind() == reflect.Struct {
			if f, ok := st.FieldByName(e.Sel.Name); ok {
				t = f.Type
			}
		}
	case *ast.CallExpr:
		ft := r.typeOf(e.Fun)
		if ft == nil || ft.Kind() != reflect.Func || ft.NumOut() == 0 {
			return nil
		}
		t = ft.Out(0)
	}
	if t == nil || !compiledType(t) {
		return nil
	}
	return t
}

// compiledType reports whether t comes from compiled code: a named type
// of a package, a pointer to one, or a func, map, slice or basic type.
func compiledType(t reflect.Type) bool {
	d := deref(t)
	if d.Name() != "" {
		return d.PkgPath() != "" || d.Kind() <= reflect.Complex128 || d.Kind() == reflect.String
	}
	switch d.Kind() {
	case reflect.Func, reflect.Map, reflect.Slice, reflect.Array, reflect.Chan:
		return true
	}
	return false
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// methodOf returns the type of method name of t (without its receiver).
func methodOf(t reflect.Type, name string) (reflect.Type, bool) {
	if t.Kind() == reflect.Interface {
		m, ok := t.MethodByName(name)
		return m.Type, ok
	}
	for _, tt := range []reflect.Type{t, reflect.PointerTo(t)} {
		if m, ok := tt.MethodByName(name); ok {
			in := make([]reflect.Type, m.Type.NumIn()-1)
			for i := range in {
				in[i] = m.Type.In(i + 1)
			}
			out := make([]reflect.Type, m.Type.NumOut())
			for i := range out {
				out[i] = m.Type.Out(i)
			}
			return reflect.FuncOf(in, out, m.Type.IsVariadic()), true
		}
	}
	return nil, false
}

// hasMember reports whether a value of type t has a field or method name.
func hasMember(t reflect.Type, name string) bool {
	if _, ok := methodOf(t, name); ok {
		return true
	}
	if st := deref(t); st.Kind() == reflect.Struct {
		_, ok := st.FieldByName(name)
		return ok
	}
	return false
}

// paramArgError explains why src, given to :inspect, is no parameter when
// it reads as a parameter's dotted name (blocks.0.attn.nope) rather than
// Go: the nearest parameter names, or that no run is open. It returns nil
// when src may be meant as Go.
func (s *Session) paramArgError(g *goEval, src string) error {
	parts := strings.Split(src, ".")
	for _, p := range parts {
		if p == "" || strings.Trim(p, "_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return nil
		}
	}
	_, perr := parser.ParseExpr(src)
	notGo := perr != nil || !g.knows(parts[0])
	if s.run == nil {
		if perr != nil {
			return fmt.Errorf("%s is not Go, and %v", src, errNoRun)
		}
		return nil
	}
	var names []string
	for _, p := range s.run.Model().Params() {
		names = append(names, p.Name)
	}
	if near := nearestParams(src, names); notGo && len(near) > 0 {
		return fmt.Errorf("no parameter %s; the nearest: %s (:params lists them)", src, strings.Join(near, ", "))
	}
	if perr != nil {
		return fmt.Errorf("no parameter %s (:params lists them)", src)
	}
	return nil
}

// nearestParams returns up to four parameter names nearest to name: those
// sharing the most leading dotted parts with it (at least one), the
// closest in spelling first; or, sharing none, those within a typo of it.
func nearestParams(name string, names []string) []string {
	parts := strings.Split(name, ".")
	common := func(n string) int {
		q := strings.Split(n, ".")
		i := 0
		for i < len(q) && i < len(parts) && q[i] == parts[i] {
			i++
		}
		return i
	}
	best := 0
	for _, n := range names {
		best = max(best, common(n))
	}
	var out []string
	for _, n := range names {
		if best > 0 && common(n) == best || best == 0 && nearest(name, []string{n}) != "" {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return editDistance(name, out[i]) < editDistance(name, out[j]) })
	return out[:min(len(out), 4)]
}
