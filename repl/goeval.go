package repl

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/repl/symbols"
	"github.com/traefik/yaegi/interp"
)

// bindPath is the binary package through which the session hands its live
// values to the interpreter.
const bindPath = "github.com/forgeml/forge/repl/bind"

// goEval is the Go interpreter of a session.
type goEval struct {
	i *interp.Interpreter
	// The values bound to model, tr, run and ctx (read by the interpreter
	// through bindPath when bind runs).
	model *gpt.Model
	tr    *train.Trainer
	run   *train.Session
	ctx   context.Context
	cur   context.Context // the running evaluation's context
	// names declared at the top level by the code the session evaluated
	// (the user's and its own), for completion and for resolving names.
	names map[string]bool
	// types: the names among names that are types; values: those that
	// are values the interpreter accepted, which can be looked at.
	types, values map[string]bool
	// hasAns: ans is bound (an expression has been evaluated).
	hasAns bool
}

// packages maps the names the interpreter imports to their paths.
var packages = map[string]string{
	"forge": "github.com/forgeml/forge/forge", "nn": "github.com/forgeml/forge/forge/nn",
	"gpt": "github.com/forgeml/forge/forge/gpt", "optim": "github.com/forgeml/forge/forge/optim",
	"train": "github.com/forgeml/forge/forge/train", "tokenizer": "github.com/forgeml/forge/forge/tokenizer",
	"data": "github.com/forgeml/forge/forge/data", "configs": "github.com/forgeml/forge/configs",
	"errors": "errors", "fmt": "fmt", "math": "math", "sort": "sort", "strconv": "strconv",
	"strings": "strings", "time": "time",
}

// sessionContext is ctx in the interpreter: it is cancelled when the
// evaluation that uses it is interrupted.
type sessionContext struct{ g *goEval }

func (c sessionContext) Deadline() (time.Time, bool) { return c.g.cur.Deadline() }
func (c sessionContext) Done() <-chan struct{}       { return c.g.cur.Done() }
func (c sessionContext) Err() error                  { return c.g.cur.Err() }
func (c sessionContext) Value(k any) any             { return c.g.cur.Value(k) }

func (s *Session) interp() (*goEval, error) {
	if s.goi != nil {
		return s.goi, nil
	}
	g := &goEval{names: map[string]bool{}, types: map[string]bool{}, values: map[string]bool{}, cur: context.Background()}
	g.ctx = sessionContext{g}
	g.i = interp.New(interp.Options{Stdout: s.stdout, Stderr: io.Discard})
	if err := g.i.Use(symbols.Symbols); err != nil {
		return nil, err
	}
	if err := g.i.Use(interp.Exports{bindPath + "/bind": {
		"Model": reflect.ValueOf(&g.model).Elem(),
		"Tr":    reflect.ValueOf(&g.tr).Elem(),
		"Run":   reflect.ValueOf(&g.run).Elem(),
		"Ctx":   reflect.ValueOf(&g.ctx).Elem(),
	}}); err != nil {
		return nil, err
	}
	var imp strings.Builder
	imp.WriteString("import (\n")
	for _, name := range sortedKeys(packages) {
		fmt.Fprintf(&imp, "\t%s %q\n", name, packages[name])
	}
	fmt.Fprintf(&imp, "\tbind %q\n)", bindPath)
	if _, err := g.i.Eval(imp.String()); err != nil {
		return nil, fmt.Errorf("repl: importing the library into the interpreter: %v", err)
	}
	if err := g.bind(s); err != nil {
		return nil, err
	}
	s.goi = g
	return g, nil
}

// bind (re)binds model, tr, run and ctx to the session's open run.
func (g *goEval) bind(s *Session) error {
	g.model, g.tr, g.run = nil, nil, s.run
	if s.run != nil {
		g.model, g.tr = s.run.Model(), s.run.Trainer()
	}
	const code = "model, tr, run, ctx := bind.Model, bind.Tr, bind.Run, bind.Ctx"
	_, err := g.i.Eval(code)
	g.noteNames(code, err == nil)
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// eval runs code in the interpreter, interrupted by ctx. code is what
// the session hands the interpreter; user is the Go the user typed in it
// (for errors), with extra the names code binds around it and alias the
// session's temporary names in code mapped to the user's words.
func (g *goEval) eval(ctx context.Context, code string) (reflect.Value, error) {
	return g.evalAs(ctx, code, "", nil)
}

func (g *goEval) evalAs(ctx context.Context, code, user string, alias map[string]string, extra ...string) (reflect.Value, error) {
	if user != "" {
		if u := g.undefined(user, extra...); u != nil {
			return reflect.Value{}, u
		}
	}
	g.cur = ctx
	defer func() { g.cur = context.Background() }()
	v, err := g.i.EvalWithContext(ctx, code)
	if err != nil {
		// A panic comes after the declarations ran; a refused input
		// declared nothing (a later use of its names is undefined, not a
		// use of what the interpreter left half-declared).
		var p interp.Panic
		if errors.As(err, &p) {
			g.noteNames(code, true)
		}
		return v, g.explain(ctx, err, user, alias)
	}
	g.noteNames(code, true)
	return v, nil
}

// explain turns an interpreter error into one line in the user's terms:
// the interpreter's own names, types and positions are translated or
// dropped. (A name that nothing declares never reaches the interpreter:
// evalAs names it as Go does, with the nearest known name.)
func (g *goEval) explain(ctx context.Context, err error, user string, alias map[string]string) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return errors.New("interrupted")
	}
	var p interp.Panic
	if errors.As(err, &p) {
		if fe, ok := p.Value.(*forge.Error); ok {
			return fe
		}
	}
	e := goError(err, ctx)
	var fe *forge.Error
	if errors.As(e, &fe) {
		return e
	}
	msg := e.Error()
	if strings.Contains(msg, "func(*train.Session)") || strings.Contains(msg, "unaddressable value") {
		if sel := assignedMethod(user); sel != "" {
			return fmt.Errorf("%s cannot be replaced: a run keeps its model, trainer, config and data together (%s() reads it); to train another model, start a run with :new", sel, sel)
		}
	}
	if strings.HasPrefix(msg, "syntax error: ") && user != "" {
		msg = syntaxError(user, msg)
	}
	return errors.New(scrub(msg, alias))
}

var sessionType = reflect.TypeOf((*train.Session)(nil))

// assignedMethod is the first x.Name that src assigns to where Name is a
// method of a run ("" if none): the interpreter words an assignment to
// a method (run.Model = m) as a mismatch with the method's type.
func assignedMethod(src string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+src+"\n}", 0)
	if err != nil {
		return ""
	}
	var found string
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || found != "" {
			return found == ""
		}
		for _, l := range as.Lhs {
			if sel, ok := l.(*ast.SelectorExpr); ok {
				if _, method := sessionType.MethodByName(sel.Sel.Name); !method {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok {
					found = x.Name + "." + sel.Sel.Name
					return false
				}
			}
		}
		return true
	})
	return found
}

var (
	// yaegi's names of Go's types: float64T, boolT, …
	reInterpType = regexp.MustCompile(`\b(bool|string|error|int|int8|int16|int32|int64|uint|uint8|uint16|uint32|uint64|uintptr|float32|float64|complex64|complex128|nil|func|map|slice|array|ptr|struct|interface|chan)T\b`)
	rePosition   = regexp.MustCompile(`(_\.go:)?\b\d+:\d+: ?`)
	reTemp       = regexp.MustCompile(`\b__([a-z]+)\d*\b`)
	reImported   = regexp.MustCompile(`(\w+)/_\.go redeclared in this block`)
	reConvert    = regexp.MustCompile(`reflect\.Value\.Convert: value of type (\S+) cannot be converted to type (\S+)`)
	reReflect    = regexp.MustCompile(`reflect(\.Value\.\w+)?: `)
)

// tempWords are the words for the session's temporary names left in an
// interpreter error.
var tempWords = map[string]string{"fn": "the function", "f": "the expression", "v": "the value", "r": "the result", "cond": "the condition"}

// scrub rewrites an interpreter message in the user's terms.
func scrub(msg string, alias map[string]string) string {
	for from, to := range alias {
		msg = regexp.MustCompile(`\b`+regexp.QuoteMeta(from)+`\b`).ReplaceAllLiteralString(msg, to)
	}
	msg = reTemp.ReplaceAllStringFunc(msg, func(m string) string {
		if w, ok := tempWords[reTemp.FindStringSubmatch(m)[1]]; ok {
			return w
		}
		return "a value"
	})
	msg = strings.TrimPrefix(msg, "CFG post-order panic: ")
	msg = strings.ReplaceAll(msg, "CFG post-order panic: ", "")
	msg = rePosition.ReplaceAllString(msg, "")
	msg = reInterpType.ReplaceAllString(msg, "$1")
	msg = strings.ReplaceAll(msg, "undefined selector: ", "no field or method ")
	msg = strings.ReplaceAll(msg, "undefined selector ", "no field or method ")
	msg = reImported.ReplaceAllString(msg, "$1 is already imported")
	msg = reConvert.ReplaceAllString(msg, "cannot use a value of type $1 as type $2")
	msg = reReflect.ReplaceAllString(msg, "")
	return msg
}

// syntaxError words a syntax error found in the code wrapped around the
// user's src (yaegi's, or the session's) as being at the end of src.
func syntaxError(src, msg string) string {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+src, 0); err == nil {
		return msg
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}", 0)
	var el scanner.ErrorList
	if !errors.As(err, &el) || len(el) == 0 {
		return msg
	}
	if el[0].Pos.Line > 2+strings.Count(src, "\n") { // past the user's last line
		return "syntax error: " + regexp.MustCompile(`found '.*'$`).ReplaceAllString(el[0].Msg, "found the end of the input")
	}
	return "syntax error: " + el[0].Msg
}

var posPrefix = regexp.MustCompile(`^(_\.go:)?\d+:\d+: `)

// goError makes an interpreter error one readable line.
func goError(err error, ctx context.Context) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return errors.New("interrupted")
	}
	var p interp.Panic
	if errors.As(err, &p) {
		return panicError(p.Value)
	}
	var sl scanner.ErrorList
	if errors.As(err, &sl) && len(sl) > 0 {
		return fmt.Errorf("syntax error: %s", posPrefix.ReplaceAllString(sl[0].Error(), ""))
	}
	msg := posPrefix.ReplaceAllString(err.Error(), "")
	if strings.HasPrefix(msg, "expected ") || strings.Contains(msg, "found ") {
		return fmt.Errorf("syntax error: %s", msg)
	}
	var fe *forge.Error
	if errors.As(err, &fe) {
		return fe
	}
	return errors.New(msg)
}

// voidBuiltins are the builtins that return nothing.
var voidBuiltins = map[string]bool{"panic": true, "print": true, "println": true, "delete": true, "close": true, "clear": true}

// leaveWords are what Python and IPython users type to leave; unless the
// session declared them, they leave as :quit does (saving first).
var leaveWords = map[string]bool{"quit": true, "exit": true, "quit()": true, "exit()": true}

// evalGo evaluates Go: an expression's value is printed and bound to ans;
// statements and declarations print nothing (except their own output).
func (s *Session) evalGo(ctx context.Context, src string) error {
	g, err := s.interp()
	if err != nil {
		return err
	}
	if leaveWords[src] && !g.names[strings.TrimSuffix(src, "()")] {
		return cmdQuit(s, ctx, nil)
	}
	expr, perr := parser.ParseExpr(src)
	if perr != nil {
		_, err := g.evalAs(ctx, src, src, nil)
		return err
	}
	if id, ok := expr.(*ast.Ident); ok {
		// A name: look, then bind ans (looking twice has no effect).
		v, err := g.evalAs(ctx, src, src, nil)
		if err != nil {
			return err
		}
		if id.Name != "ans" {
			if _, err := g.evalAs(ctx, "ans := "+src, src, nil); err != nil {
				return err
			}
			g.hasAns = true
		}
		s.print(v)
		return nil
	}
	call, ok := ast.Unparen(expr).(*ast.CallExpr)
	if !ok {
		return s.evalValue(ctx, g, "("+src+")", src, nil)
	}
	// A call: find how many results it has without calling it, by taking
	// the function as a value first (its receiver is evaluated once).
	fun := src[call.Fun.Pos()-1 : call.Fun.End()-1]
	args := src[call.Lparen-1 : call.Rparen]
	nout := 1
	var ftype reflect.Type
	var alias map[string]string
	code := src
	if id, ok := call.Fun.(*ast.Ident); ok && voidBuiltins[id.Name] {
		nout = 0
	} else if sel, ok := call.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, "fmt") && (strings.HasPrefix(sel.Sel.Name, "Print") || strings.HasPrefix(sel.Sel.Name, "Fprint")) {
		nout = 0 // fmt.Println's byte count is noise
	} else if fv, err := g.evalAs(ctx, "__fn := "+fun, fun, nil); err == nil && fv.Kind() == reflect.Func {
		ftype = fv.Type()
		nout = ftype.NumOut()
		code = "__fn" + args
		alias = map[string]string{"__fn": fun}
		if ftype.IsVariadic() {
			if code, err = g.typedArgs(ctx, src, call, ftype, alias); err != nil {
				return callError(err, fun, ftype)
			}
		}
	} else if err != nil && ctx.Err() != nil {
		return err
	} else if err != nil && strings.Contains(err.Error(), "no field or method") {
		var u undefinedError
		if errors.As(err, &u) {
			return err
		}
		return fmt.Errorf("%s: %v", fun, err)
	}
	switch nout {
	case 0:
		_, err := g.evalAs(ctx, code, src, alias)
		return callError(err, fun, ftype)
	case 1:
		return callError(s.evalValue(ctx, g, code, src, alias), fun, ftype)
	}
	// Several results: (v, err) prints v or returns err; others print as
	// a tuple. ans is the first.
	names := make([]string, nout)
	for i := range names {
		names[i] = fmt.Sprintf("__r%d", i)
	}
	if _, err := g.evalAs(ctx, strings.Join(names, ", ")+" := "+code, src, alias); err != nil {
		return callError(err, fun, ftype)
	}
	vals := make([]reflect.Value, nout)
	for i, n := range names {
		if vals[i], err = g.eval(ctx, n); err != nil {
			return err
		}
	}
	if ftype.Out(nout - 1).Implements(errorType) {
		if e, ok := valueOf(vals[nout-1]).(error); ok && e != nil {
			return e
		}
		vals = vals[:nout-1]
	}
	if _, err := g.eval(ctx, "ans := __r0"); err != nil {
		return err
	}
	g.hasAns = true
	if len(vals) == 1 {
		s.print(vals[0])
		return nil
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = format(v)
	}
	fmt.Fprintf(s.stdout, "(%s)\n", strings.Join(parts, ", "))
	return nil
}

// typedArgs works around the interpreter's call of a variadic library
// method (run.Train(ctx, 100)): it converts a constant argument in a fixed
// position to the type of the parameter after it, not its own. Each fixed
// argument whose parameter type can be named is bound first to a variable
// of that type (__a1 for 100), in order, and the call is made with those
// (__fn(ctx, __a1)); alias learns the temporaries' source.
func (g *goEval) typedArgs(ctx context.Context, src string, call *ast.CallExpr, ftype reflect.Type, alias map[string]string) (string, error) {
	fixed := ftype.NumIn() - 1
	args := make([]string, len(call.Args))
	for i, a := range call.Args {
		args[i] = src[a.Pos()-1 : a.End()-1]
		if i >= fixed {
			continue
		}
		tname, ok := interpTypeName(ftype.In(i))
		if !ok {
			continue
		}
		tmp := fmt.Sprintf("__a%d", i)
		if _, err := g.evalAs(ctx, fmt.Sprintf("var %s %s = (%s)", tmp, tname, args[i]), args[i], alias); err != nil {
			return "", err
		}
		alias[tmp] = args[i]
		args[i] = tmp
	}
	code := "__fn(" + strings.Join(args, ", ")
	if call.Ellipsis.IsValid() {
		code += "..."
	}
	return code + ")", nil
}

// interpTypeName is how the interpreter names t: a predeclared type, or a named
// type of a package it imports.
func interpTypeName(t reflect.Type) (string, bool) {
	if t.Name() == "" {
		return "", false
	}
	if t.PkgPath() == "" {
		return t.Name(), true
	}
	for name, path := range packages {
		if path == t.PkgPath() {
			return name + "." + t.Name(), true
		}
	}
	return "", false
}

// evalValue evaluates the expression code (the user's src), prints its
// value and binds it to ans. The value goes through a temporary so that
// an expression reading ans (ans*2) sees the previous ans.
func (s *Session) evalValue(ctx context.Context, g *goEval, code, src string, alias map[string]string) error {
	if _, err := g.evalAs(ctx, "__v := "+code, src, alias); err != nil {
		return err
	}
	v, err := g.eval(ctx, "ans := __v")
	if err != nil {
		return err
	}
	g.hasAns = true
	s.print(v)
	return nil
}

// callError adds to an error about a call's arguments what the function
// takes.
func callError(err error, fun string, ftype reflect.Type) error {
	if err == nil || ftype == nil {
		return err
	}
	msg := err.Error()
	if msg == "too many arguments" || msg == "not enough arguments" {
		msg += " in call to " + fun
	}
	if strings.Contains(msg, "argument") || strings.HasPrefix(msg, "cannot use ") || strings.HasPrefix(msg, "cannot convert ") {
		return fmt.Errorf("%s: %s takes %s (?%s documents it)", msg, fun, signature(ftype), fun)
	}
	return err
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

var errorType = reflect.TypeOf((*error)(nil)).Elem()

// valueOf unwraps a reflect value to what it holds (nil for invalid).
func valueOf(v reflect.Value) any {
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Interface) {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if !v.IsValid() || !v.CanInterface() {
		return nil
	}
	return v.Interface()
}

// print writes a value: tensors torch-style at the terminal's width,
// Stringers by their String, structs with field names.
func (s *Session) print(v reflect.Value) {
	if !v.IsValid() {
		return
	}
	fmt.Fprintln(s.stdout, format(v))
}

func format(v reflect.Value) string {
	x := valueOf(v)
	switch t := x.(type) {
	case nil:
		return "nil"
	case *forge.Tensor:
		if t == nil {
			return "nil"
		}
		return t.String()
	case fmt.Stringer, error:
		return strings.TrimRight(fmt.Sprintf("%v", t), "\n")
	case string:
		return fmt.Sprintf("%q", t)
	}
	rv := reflect.ValueOf(x)
	if rv.Kind() == reflect.Struct || rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.Struct {
		return fmt.Sprintf("%+v", x)
	}
	return fmt.Sprintf("%v", x)
}

// noteNames records the names src declares at top level, for completion
// and for resolving names; accepted: the interpreter has run src, so its
// values can be looked at (a declaration it refused leaves the name
// half-declared, and looking at it gives a stale value).
func (g *goEval) noteNames(src string, accepted bool) {
	note := func(name string, kind byte) {
		if name == "_" {
			return
		}
		g.names[name] = true
		switch {
		case kind == 't':
			g.types[name] = true
		case kind == 'v' && accepted:
			g.values[name] = true
		}
		if kind != 'v' {
			delete(g.values, name)
		}
	}
	specs := func(d *ast.GenDecl) {
		for _, sp := range d.Specs {
			switch sp := sp.(type) {
			case *ast.ValueSpec:
				for _, n := range sp.Names {
					note(n.Name, 'v')
				}
			case *ast.TypeSpec:
				note(sp.Name.Name, 't')
			case *ast.ImportSpec:
				name := strings.Trim(sp.Path.Value, "\"`")
				name = name[strings.LastIndexByte(name, '/')+1:]
				if sp.Name != nil {
					name = sp.Name.Name
				}
				note(name, 'p')
			}
		}
	}
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", "package p\n"+src, 0); err == nil {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					note(d.Name.Name, 'v')
				}
			case *ast.GenDecl:
				specs(d)
			}
		}
		return
	}
	f, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}", 0)
	if err != nil {
		return
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						note(id.Name, 'v')
					}
				}
			}
		case *ast.DeclStmt:
			if d, ok := st.Decl.(*ast.GenDecl); ok {
				specs(d)
			}
		}
	}
}

// incomplete reports whether Go source has unclosed brackets or an
// unterminated string or comment, so more lines must follow.
func incomplete(src string) bool {
	depth := 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case '"', '\'':
			j := i + 1
			for ; j < len(src) && src[j] != c && src[j] != '\n'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			i = j // an unterminated "…" ends at the line: a syntax error, not more input
		case '`':
			j := strings.IndexByte(src[i+1:], '`')
			if j < 0 {
				return true
			}
			i += j + 1
		case '/':
			if strings.HasPrefix(src[i:], "//") {
				j := strings.IndexByte(src[i:], '\n')
				if j < 0 {
					return depth > 0
				}
				i += j
			} else if strings.HasPrefix(src[i:], "/*") {
				j := strings.Index(src[i+2:], "*/")
				if j < 0 {
					return true
				}
				i += j + 3
			}
		}
	}
	return depth > 0
}

// condVars are the names a :run until condition sees.
var condVars = []string{"step", "loss", "val_loss", "lr", "grad_norm"}

const condParams = "(step int, loss, val_loss, lr, grad_norm float64)"

// condition compiles the Go condition of :run until into a function of
// condVars returning bool.
func (g *goEval) condition(ctx context.Context, cond string) (reflect.Value, error) {
	if _, err := parser.ParseExpr(cond); err != nil {
		msg := posPrefix.ReplaceAllString(err.Error(), "")
		if el, ok := err.(scanner.ErrorList); ok && len(el) > 0 {
			msg = el[0].Msg
		}
		msg = strings.ReplaceAll(msg, "'EOF'", "the end")
		return reflect.Value{}, fmt.Errorf("syntax error: %s (give a condition such as loss < 2 or step >= 300)", msg)
	}
	fv, err := g.evalAs(ctx, "__cond := func"+condParams+" bool { return "+cond+" }", cond, nil, condVars...)
	if err == nil && fv.Kind() == reflect.Func {
		return fv, nil
	}
	var u undefinedError
	if errors.As(err, &u) || ctx.Err() != nil {
		return fv, err
	}
	// Valid Go that is not true or false (loss): say what it is.
	if v, err2 := g.eval(ctx, "__cond := func"+condParams+" any { return "+cond+" }; __cond(0, 0, 0, 0, 0)"); err2 == nil {
		if x := valueOf(v); x != nil {
			return fv, fmt.Errorf("%s is a %T, not true or false: give a condition such as loss < 2 or step >= 300", cond, x)
		}
	}
	if err == nil {
		err = errors.New("not a condition")
	}
	return fv, fmt.Errorf("%v (give a condition such as loss < 2 or step >= 300)", err)
}
