package emu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kernel is one kernel function of a .metal file, as the launcher
// generator sees it: `kernel void name(...)` (or `[[kernel]] void`), or an
// explicit template instantiation named by [[host_name("...")]].
type Kernel struct {
	Name   string  // the function name (the host_name of an instantiation)
	File   string  // the .metal file
	Line   int     // line of the declaration
	Params []Param // in declaration order
	// MaxThreads is N of [[max_total_threads_per_threadgroup(N)]], 0 if
	// the kernel does not declare it.
	MaxThreads int

	fn       string // the C++ function to call ("name" or "name<float>")
	template bool   // a template: only its instantiations are launchable
	self     string // the function as its body names it ("name", "name<T, N>")
}

// Param is one kernel parameter.
type Param struct {
	Name string
	// Type is the declared type as written, e.g. "device const float*",
	// "constant Params&", "uint3".
	Type string
	// AddressSpace is "device", "constant", "threadgroup", "thread" or ""
	// (a built-in value).
	AddressSpace string
	// Elem is Type without address space, cv-qualifiers, * and &:
	// "float", "Params", "uint3".
	Elem string
	// Pointer and Ref tell how a buffer is declared (T* or T&).
	Pointer, Ref bool
	// BufferIndex is n of [[buffer(n)]], -1 for a built-in.
	BufferIndex int
	// Builtin is the attribute of a built-in value, e.g.
	// "thread_position_in_grid"; "" for a buffer.
	Builtin string
	// FunctionConstant names the bool function constant of an optional
	// buffer ([[buffer(n), function_constant(name)]]): the buffer need not
	// be bound when the constant is false or not set.
	FunctionConstant string
}

// Buffers returns the largest [[buffer(n)]] index + 1: the number of
// arguments a dispatch of k must bind.
func (k Kernel) Buffers() int {
	n := 0
	for _, p := range k.Params {
		if p.BufferIndex+1 > n {
			n = p.BufferIndex + 1
		}
	}
	return n
}

// builtins are the attributes of kernel parameters the emulator provides,
// mapped to the forge_thread_info field and whether it has 3 components.
var builtins = map[string]struct {
	field string
	three bool
}{
	"thread_position_in_grid":             {"tpig", true},
	"thread_position_in_threadgroup":      {"tptg", true},
	"threadgroup_position_in_grid":        {"tgpig", true},
	"threads_per_threadgroup":             {"ntptg", true},
	"threadgroups_per_grid":               {"ntgpg", true},
	"threads_per_grid":                    {"ntpg", true},
	"dispatch_threads_per_threadgroup":    {"ntptg", true},
	"thread_index_in_threadgroup":         {"tiitg", false},
	"thread_index_in_simdgroup":           {"tiisg", false},
	"simdgroup_index_in_threadgroup":      {"sgiitg", false},
	"threads_per_simdgroup":               {"tpsg", false},
	"thread_execution_width":              {"tpsg", false},
	"simdgroups_per_threadgroup":          {"sgptg", false},
	"dispatch_simdgroups_per_threadgroup": {"sgptg", false},
}

// builtinTypes are the types a built-in parameter may be declared with.
var builtinTypes = map[string]int{
	"uint": 1, "ushort": 1, "int": 1, "short": 1,
	"uint2": 2, "ushort2": 2, "int2": 2, "short2": 2,
	"uint3": 3, "ushort3": 3, "int3": 3, "short3": 3,
	"vec<uint,2>": 2, "vec<uint,3>": 3, "vec<ushort,2>": 2, "vec<ushort,3>": 3,
}

// ---- lexer -----------------------------------------------------------------

type tokKind uint8

const (
	tIdent tokKind = iota
	tNumber
	tString
	tChar
	tPunct
)

type token struct {
	kind tokKind
	text string
	off  int // byte offset in the source
	end  int
	line int
}

// lex splits MSL source into tokens, dropping comments and preprocessor
// lines. Every punctuation character is its own token (so `]]` and `>>`
// are two), which keeps bracket matching simple. Line numbers follow
// `#line N` directives, as clang's do: package kernels puts a prelude
// before every file and then `#line 1 "file.metal"`, so the file's tokens
// carry its own line numbers (the directive's file name is not kept).
func lex(src string) []token {
	var toks []token
	line := 1
	bol := true // at the beginning of a line (only blanks so far)
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			bol = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
			i += 2
			line++
			continue
		case c == '#' && bol:
			// A preprocessor line, with continuations. Code under `#if 0`
			// is skipped up to its #else, #elif or #endif.
			if ifZero(src[i:]) {
				end := skipIfZero(src, i)
				line += strings.Count(src[i:end], "\n")
				i = end
				continue
			}
			ds := i
			for i < len(src) && src[i] != '\n' {
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					line++
					i++
				} else if src[i] == '/' && i+1 < len(src) && src[i+1] == '*' {
					j := strings.Index(src[i+2:], "*/")
					if j < 0 {
						i = len(src)
						break
					}
					line += strings.Count(src[i:i+2+j+2], "\n")
					i += 2 + j + 2
					continue
				}
				i++
			}
			if n, ok := lineDirective(src[ds:i]); ok {
				line = n - 1 // the next line is n
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				line += strings.Count(src[i:], "\n")
				i = len(src)
				continue
			}
			line += strings.Count(src[i:i+2+j+2], "\n")
			i += 2 + j + 2
			continue
		}
		bol = false
		start := i
		switch {
		case isIdentStart(c):
			for i < len(src) && isIdentChar(src[i]) {
				i++
			}
			toks = append(toks, token{tIdent, src[start:i], start, i, line})
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			for i < len(src) && (isIdentChar(src[i]) || src[i] == '.' || src[i] == '\'' ||
				(src[i] == '+' || src[i] == '-') && (src[i-1] == 'e' || src[i-1] == 'E' || src[i-1] == 'p' || src[i-1] == 'P')) {
				i++
			}
			toks = append(toks, token{tNumber, src[start:i], start, i, line})
		case c == '"' || c == '\'':
			i++
			for i < len(src) && src[i] != c && src[i] != '\n' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			if i < len(src) {
				i++
			}
			k := tString
			if c == '\'' {
				k = tChar
			}
			toks = append(toks, token{k, src[start:i], start, i, line})
		default:
			i++
			toks = append(toks, token{tPunct, src[start:i], start, i, line})
		}
	}
	return toks
}

// lineDirective returns N of a `#line N ["file"]` directive (or the
// `# N "file"` form of preprocessed output).
func lineDirective(d string) (int, bool) {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(d), "#"))
	if len(f) > 0 && f[0] == "line" {
		f = f[1:]
	}
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// ifZero reports whether the preprocessor line at the start of s is
// `#if 0`.
func ifZero(s string) bool {
	l, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "#"))
	return len(f) >= 2 && f[0] == "if" && f[1] == "0"
}

// skipIfZero returns the offset of the line after the #else, #elif or
// #endif that ends the `#if 0` block starting at i.
func skipIfZero(src string, i int) int {
	depth := 0
	for i < len(src) {
		end := strings.IndexByte(src[i:], '\n')
		if end < 0 {
			end = len(src) - i
		}
		l := strings.TrimSpace(src[i : i+end])
		next := i + end
		if next < len(src) {
			next++
		}
		if strings.HasPrefix(l, "#") {
			f := strings.Fields(strings.TrimPrefix(l, "#"))
			if len(f) > 0 {
				switch {
				case strings.HasPrefix(f[0], "if"):
					depth++
				case f[0] == "endif":
					depth--
					if depth == 0 {
						return next
					}
				case (f[0] == "else" || f[0] == "elif") && depth == 1:
					return next
				}
			}
		}
		i = next
	}
	return len(src)
}

// closing returns the index of the close token matching the open token at
// toks[i] (brackets of one kind, nested), or len(toks) if it never closes.
func closing(toks []token, i int, open, close string) int {
	d := 0
	for ; i < len(toks); i++ {
		switch toks[i].text {
		case open:
			d++
		case close:
			if d--; d == 0 {
				return i
			}
		}
	}
	return len(toks)
}

// opening returns the index of the open token matching the close token at
// toks[i], searching backwards, or -1 if there is none.
func opening(toks []token, i int, open, close string) int {
	d := 0
	for ; i >= 0; i-- {
		switch toks[i].text {
		case close:
			d++
		case open:
			if d--; d == 0 {
				return i
			}
		}
	}
	return -1
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// ---- file analysis ---------------------------------------------------------

// fileInfo is what the generator needs to know about one .metal file.
type fileInfo struct {
	name    string
	kernels []Kernel               // launchable kernels (non-template and instantiations)
	consts  []funcConst            // [[function_constant(i)]] declarations
	derived []derivedConst         // program-scope constants computed from function constants
	tgDecls []tgDecl               // block-scope threadgroup declarations
	reads   map[string][]funcConst // function → the function constants it requires (requiredConsts)
	edits   []edit                 // source rewrites
	rdv     bool                   // mentions a rendezvous function
	direct  bool                   // its kernels can run without fibers
}

type funcConst struct {
	Name  string
	Type  string
	Index int
	Line  int
}

type derivedConst struct {
	name, typ, init string
	line            int
}

type tgDecl struct {
	typ, name, dims string
	line            int
}

type edit struct {
	start, end int
	text       string
}

func errAt(file string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
}

// ParseKernels returns the kernels declared in an MSL source file: every
// `kernel void name(...)` / `[[kernel]] void name(...)` function that is
// not a template, and every explicit instantiation of a template kernel
// that carries [[host_name("...")]]. A parameter attribute the emulator
// does not know is an error naming file:line.
func ParseKernels(file, src string) ([]Kernel, error) {
	fi, err := analyze(file, src)
	if err != nil {
		return nil, err
	}
	return fi.kernels, nil
}

// mayRendezvous reports whether src (comments and preprocessor lines
// included, to be safe) mentions a function that may block a GPU thread:
// a barrier, simdgroup_load/store, a simd_*/quad_* function or a tensor op
// (MetalPerformancePrimitives' matmul2d rendezvouses its execution scope).
func mayRendezvous(src string) bool {
	for i := 0; i < len(src); {
		if !isIdentStart(src[i]) || i > 0 && isIdentChar(src[i-1]) {
			i++
			continue
		}
		j := i
		for j < len(src) && isIdentChar(src[j]) {
			j++
		}
		w := src[i:j]
		if w == "threadgroup_barrier" || w == "simdgroup_barrier" || w == "simdgroup_load" || w == "simdgroup_store" ||
			w == "thread_elements" || w == "simdgroup_multiply" || w == "simdgroup_multiply_accumulate" ||
			w == "matmul2d" || w == "tensor_ops" ||
			strings.HasPrefix(w, "simd_") || strings.HasPrefix(w, "quad_") {
			return true
		}
		i = j
	}
	return false
}

// includesLocal reports whether src #includes a file with "quotes".
func includesLocal(src string) bool {
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") && strings.Contains(l, "include") && strings.Contains(l, "\"") {
			return true
		}
	}
	return false
}

func analyze(file, src string) (*fileInfo, error) {
	toks := lex(src)
	substituteAttrConstants(toks, intConstants(src, toks))
	fi := &fileInfo{name: file, rdv: mayRendezvous(src)}
	fi.edits = append(fi.edits, vectorCastEdits(toks)...)
	templates := map[string]*Kernel{}
	depth := 0   // brace depth
	paren := 0   // paren/bracket depth
	stmt := true // at the start of a statement
	var fcNames = map[string]bool{}
	self := "" // the kernel whose body the scan is in
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.text == "[" {
			if e, ok := attrAt(toks, i); ok {
				if depth == 0 && paren == 0 && hasAttr(toks[i+2:e-1], "kernel") {
					k, next, err := parseKernelAt(file, toks, i, e+1)
					if err != nil {
						return nil, err
					}
					if k != nil {
						if k.template {
							templates[k.Name] = k
						} else {
							fi.kernels = append(fi.kernels, *k)
						}
						self = k.self
						i = next
						continue
					}
				}
				i = e
				continue
			}
		}
		switch {
		case t.kind == tPunct && t.text == "{":
			depth++
			stmt = true
			continue
		case t.kind == tPunct && t.text == "}":
			depth--
			stmt = true
			if depth == 0 {
				self = ""
			}
			continue
		case t.kind == tPunct && t.text == ";":
			stmt = paren == 0
			continue
		case t.kind == tPunct && (t.text == "(" || t.text == "["):
			paren++
			stmt = false
			continue
		case t.kind == tPunct && (t.text == ")" || t.text == "]"):
			paren--
			if t.text == ")" && paren == 0 {
				// `for (...) threadgroup ...` is not a declaration context we rewrite
				stmt = false
			}
			continue
		}
		wasStmt := stmt
		stmt = false
		if t.kind != tIdent || paren != 0 {
			continue
		}
		switch {
		case depth == 0 && t.text == "template" && i+1 < len(toks) && toks[i+1].text != "<":
			// explicit instantiation: template [[host_name("x")]] [[kernel]] void f<T>(...);
			k, edits, next, err := parseInstantiation(file, toks, i, templates)
			if err != nil {
				return nil, err
			}
			if k != nil {
				fi.kernels = append(fi.kernels, *k)
				fi.edits = append(fi.edits, edits...)
			}
			i = next
		case depth == 0 && t.text == "kernel":
			k, next, err := parseKernelAt(file, toks, i, i+1)
			if err != nil {
				return nil, err
			}
			if k == nil {
				continue
			}
			if k.template {
				templates[k.Name] = k
			} else {
				fi.kernels = append(fi.kernels, *k)
			}
			self = k.self
			i = next
		case depth == 0 && wasStmt && t.text == "constant":
			fc, d, e, next, err := parseConstantDecl(file, src, toks, i, fcNames)
			if err != nil {
				return nil, err
			}
			if fc != nil {
				fi.consts = append(fi.consts, *fc)
				fcNames[fc.Name] = true
				fi.edits = append(fi.edits, *e)
				i = next
				stmt = true
			} else if d != nil {
				fi.derived = append(fi.derived, *d)
				fi.edits = append(fi.edits, *e)
				i = next
				stmt = true
			}
		case depth > 0 && wasStmt && t.text == "threadgroup":
			d, e, next, err := parseTGDecl(file, src, toks, i, self)
			if err != nil {
				return nil, err
			}
			if d != nil {
				fi.tgDecls = append(fi.tgDecls, *d)
				fi.edits = append(fi.edits, *e)
				i = next
				stmt = true
			}
		}
	}
	fi.reads = requiredConsts(toks, fi)
	return fi, nil
}

// defineInt matches `#define NAME 3` (optionally parenthesised, suffixed).
var defineInt = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+\(?[ \t]*((?:0[xX][0-9a-fA-F]+)|[0-9]+)[uUlL]*[ \t]*\)?[ \t]*(?://.*)?$`)

// intConstants collects integer constants a file may use as attribute
// arguments ([[buffer(BUF_OUT)]], [[function_constant(FC_X)]]):
// #define NAME 3, enumerators, and constexpr NAME = 3.
func intConstants(src string, toks []token) map[string]int {
	m := map[string]int{}
	for _, g := range defineInt.FindAllStringSubmatch(src, -1) {
		if v, err := strconv.ParseInt(g[2], 0, 64); err == nil {
			m[g[1]] = int(v)
		}
	}
	num := func(t token) (int, bool) {
		if t.kind != tNumber {
			if v, ok := m[t.text]; ok && t.kind == tIdent {
				return v, true
			}
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimRight(t.text, "uUlL"), 0, 64)
		return int(v), err == nil
	}
	for i := 0; i < len(toks); i++ {
		switch toks[i].text {
		case "enum":
			j := i + 1
			for j < len(toks) && toks[j].text != "{" && toks[j].text != ";" {
				j++
			}
			if j >= len(toks) || toks[j].text != "{" {
				continue
			}
			next := 0
			for j++; j < len(toks) && toks[j].text != "}"; j++ {
				if toks[j].kind != tIdent {
					continue
				}
				name := toks[j].text
				if j+2 < len(toks) && toks[j+1].text == "=" {
					if v, ok := num(toks[j+2]); ok && j+3 < len(toks) && (toks[j+3].text == "," || toks[j+3].text == "}") {
						next = v
					} else {
						// an expression: skip to the next enumerator
						for j < len(toks) && toks[j].text != "," && toks[j].text != "}" {
							j++
						}
						if j < len(toks) && toks[j].text == "}" {
							j--
						}
						continue
					}
					j += 2
				}
				m[name] = next
				next++
			}
		case "constexpr":
			for j := i + 1; j+3 < len(toks) && j < i+6; j++ {
				if toks[j].kind == tIdent && toks[j+1].text == "=" && toks[j+3].text == ";" {
					if v, ok := num(toks[j+2]); ok {
						m[toks[j].text] = v
					}
					break
				}
			}
		}
	}
	return m
}

// substituteAttrConstants replaces named integer constants inside [[ ]]
// attribute lists by their values.
func substituteAttrConstants(toks []token, m map[string]int) {
	if len(m) == 0 {
		return
	}
	for i := 0; i < len(toks); i++ {
		e, ok := attrAt(toks, i)
		if !ok {
			continue
		}
		for j := i + 2; j < e-1; j++ {
			if v, ok := m[toks[j].text]; ok && toks[j].kind == tIdent && j > 0 && toks[j-1].text == "(" {
				toks[j].kind = tNumber
				toks[j].text = strconv.Itoa(v)
			}
		}
		i = e
	}
}

// vectorTypes are the MSL vector type names the shim defines as
// function-like macros that convert per element.
var vectorTypes = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range []string{"float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong"} {
		for _, n := range []string{"2", "3", "4"} {
			m[e+n] = true
		}
	}
	return m
}()

// vectorCastEdits rewrites static_cast<float4>(x) and (float4)(x) to
// float4(x): in MSL they convert per element, while clang's cast between
// vectors of the same size reinterprets the bits.
func vectorCastEdits(toks []token) []edit {
	var edits []edit
	for i := 0; i+4 < len(toks); i++ {
		if toks[i].text == "static_cast" && toks[i+1].text == "<" && vectorTypes[toks[i+2].text] &&
			toks[i+3].text == ">" && toks[i+4].text == "(" {
			edits = append(edits, edit{toks[i].off, toks[i+3].end, toks[i+2].text})
			i += 3
			continue
		}
		if toks[i].text == "(" && vectorTypes[toks[i+1].text] && toks[i+2].text == ")" && toks[i+3].text == "(" &&
			(i == 0 || (toks[i-1].kind != tIdent && toks[i-1].text != ")" && toks[i-1].text != "]")) {
			edits = append(edits, edit{toks[i].off, toks[i+2].end, toks[i+1].text})
			i += 2
		}
	}
	return edits
}

// hasAttr reports whether the attribute list toks (inside [[ ]]) holds
// the bare attribute name.
func hasAttr(toks []token, name string) bool {
	for _, a := range attrItems(toks) {
		if len(a) == 1 && a[0].text == name {
			return true
		}
	}
	return false
}

// attrAt reports whether toks[i], toks[i+1] are `[[` and returns the index
// of the matching `]]`'s second bracket.
func attrAt(toks []token, i int) (int, bool) {
	if i+1 >= len(toks) || toks[i].text != "[" || toks[i+1].text != "[" {
		return 0, false
	}
	d := 0
	for j := i; j < len(toks); j++ {
		switch toks[j].text {
		case "[":
			d++
		case "]":
			d--
			if d == 0 {
				return j, true
			}
		}
	}
	return 0, false
}

// attrItems splits the inside of [[ ... ]] (toks between the brackets) at
// top-level commas: "buffer(0)", "host_name(\"x\")".
func attrItems(toks []token) [][]token {
	var items [][]token
	var cur []token
	d := 0
	for _, t := range toks {
		switch t.text {
		case "(", "[":
			d++
		case ")", "]":
			d--
		case ",":
			if d == 0 {
				items = append(items, cur)
				cur = nil
				continue
			}
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		items = append(items, cur)
	}
	return items
}

func joinToks(toks []token) string {
	var b strings.Builder
	for i, t := range toks {
		if i > 0 && needSpace(toks[i-1], t) {
			b.WriteByte(' ')
		}
		b.WriteString(t.text)
	}
	return b.String()
}

func needSpace(a, b token) bool {
	aw := a.kind == tIdent || a.kind == tNumber
	bw := b.kind == tIdent || b.kind == tNumber
	if aw && bw {
		return true
	}
	// keep "const float *" readable: space before * or & after an identifier
	if aw && (b.text == "*" || b.text == "&") {
		return true
	}
	return false
}

// parseKernelAt parses `kernel void name(params)` or `[[kernel]] void
// name(params)`: toks[start] is `kernel` or the attribute's first bracket,
// toks[i] the token after it. A `template<...>` header right before start
// makes it a template kernel. It returns nil if the tokens are not a kernel
// definition.
func parseKernelAt(file string, toks []token, start, i int) (*Kernel, int, error) {
	// Was this preceded by a template header? Look back for `template <...>`.
	isTemplate := false
	var tparams []string // the template's parameter names
	if j := start - 1; j >= 0 && toks[j].text == ">" {
		d := 0
		for k := j; k >= 0; k-- {
			if toks[k].text == ">" {
				d++
			} else if toks[k].text == "<" {
				d--
				if d == 0 {
					if k > 0 && toks[k-1].text == "template" {
						isTemplate = true
						tparams = templateParamNames(toks[k+1 : j])
					}
					break
				}
			}
		}
	}
	// attributes like [[max_total_threads_per_threadgroup(256)]], before
	// the return type (or, in the [[kernel]] form, among the first ones)
	maxThreads := 0
	scan := func(from, to int) error {
		for a := from; a < to; a++ {
			e, ok := attrAt(toks, a)
			if !ok {
				continue
			}
			for _, it := range attrItems(toks[a+2 : e-1]) {
				if len(it) == 0 || it[0].text != "max_total_threads_per_threadgroup" {
					continue
				}
				n, err := attrInt(it)
				if err != nil || n <= 0 {
					return errAt(file, it[0].line, "[[max_total_threads_per_threadgroup(...)]] needs a positive constant")
				}
				maxThreads = n
			}
			a = e
		}
		return nil
	}
	for {
		if e, ok := attrAt(toks, i); ok {
			i = e + 1
			continue
		}
		break
	}
	// attributes right before `kernel` ([[max_total_threads_per_threadgroup(N)]] kernel void f)
	from := start
	for from >= 2 && toks[from-1].text == "]" && toks[from-2].text == "]" {
		k := opening(toks, from-1, "[", "]")
		if k < 0 {
			break
		}
		if _, ok := attrAt(toks, k); !ok {
			break
		}
		from = k
	}
	if err := scan(from, i); err != nil {
		return nil, start, err
	}
	if i >= len(toks) || toks[i].text != "void" {
		return nil, start, nil
	}
	i++
	if i >= len(toks) || toks[i].kind != tIdent {
		return nil, start, nil
	}
	name := toks[i]
	i++
	if i >= len(toks) || toks[i].text != "(" {
		return nil, start, nil
	}
	params, next, err := parseParams(file, name.text, toks, i, false)
	if err != nil {
		return nil, start, err
	}
	if next+1 < len(toks) && toks[next+1].text == ";" {
		return nil, next + 1, nil // a declaration; the definition follows
	}
	k := &Kernel{Name: name.text, File: file, Line: toks[start].line, Params: params, MaxThreads: maxThreads, fn: name.text, template: isTemplate, self: name.text}
	if isTemplate {
		k.self += "<" + strings.Join(tparams, ", ") + ">"
	}
	return k, next, nil
}

// parseParams parses a parenthesised parameter list at toks[i] == "(".
// With loose, parameters may lack attributes (explicit instantiations).
func parseParams(file, kname string, toks []token, i int, loose bool) ([]Param, int, error) {
	d := 0
	var groups [][]token
	var cur []token
	j := i
	for ; j < len(toks); j++ {
		t := toks[j]
		switch t.text {
		case "(", "[", "<":
			d++
			if d == 1 && t.text == "(" {
				continue
			}
		case ")", "]", ">":
			d--
			if d == 0 && t.text == ")" {
				if len(cur) > 0 {
					groups = append(groups, cur)
				}
				goto done
			}
		case ",":
			if d == 1 {
				groups = append(groups, cur)
				cur = nil
				continue
			}
		}
		cur = append(cur, t)
	}
	return nil, j, errAt(file, toks[i].line, "kernel %s: unterminated parameter list", kname)
done:
	var params []Param
	seen := map[int]string{}
	for _, g := range groups {
		if len(g) == 1 && g[0].text == "void" {
			continue
		}
		p, err := parseParam(file, kname, g, loose)
		if err != nil {
			return nil, j, err
		}
		if p.BufferIndex >= 0 {
			if other, dup := seen[p.BufferIndex]; dup {
				return nil, j, errAt(file, g[0].line, "kernel %s: parameters %s and %s are both [[buffer(%d)]]", kname, other, p.Name, p.BufferIndex)
			}
			seen[p.BufferIndex] = p.Name
		}
		params = append(params, p)
	}
	return params, j, nil
}

var addressSpaces = map[string]bool{"device": true, "constant": true, "threadgroup": true, "thread": true}

func parseParam(file, kname string, g []token, loose bool) (Param, error) {
	p := Param{BufferIndex: -1}
	line := g[0].line
	// Split off trailing attributes.
	body := g
	var attrs [][]token
	for k := 0; k < len(g); k++ {
		if e, ok := attrAt(g, k); ok {
			if len(attrs) == 0 {
				body = g[:k]
			}
			attrs = append(attrs, attrItems(g[k+2:e-1])...)
			k = e
		}
	}
	var typ []token
	if loose && unnamed(body) {
		typ = body
	} else {
		if len(body) < 2 {
			return p, errAt(file, line, "kernel %s: cannot parse parameter %q", kname, joinToks(g))
		}
		nameTok := body[len(body)-1]
		if nameTok.kind != tIdent {
			return p, errAt(file, line, "kernel %s: cannot parse parameter %q (unnamed parameter?)", kname, joinToks(g))
		}
		p.Name = nameTok.text
		typ = body[:len(body)-1]
	}
	p.Type = joinToks(typ)
	var elem []token
	for _, t := range typ {
		switch {
		case addressSpaces[t.text]:
			if p.AddressSpace == "" {
				p.AddressSpace = t.text
			}
		case t.text == "*":
			p.Pointer = true
		case t.text == "&":
			p.Ref = true
		case t.text == "const" || t.text == "volatile" || t.text == "restrict" || t.text == "__restrict":
		default:
			elem = append(elem, t)
		}
	}
	p.Elem = joinToks(elem)
	for _, a := range attrs {
		if len(a) == 0 {
			continue
		}
		an := a[0].text
		switch {
		case an == "buffer":
			n, err := attrInt(a)
			if err != nil {
				return p, errAt(file, a[0].line, "kernel %s: parameter %s: [[buffer(...)]] needs a constant index", kname, p.Name)
			}
			p.BufferIndex = n
		case builtins[an].field != "":
			if len(a) != 1 {
				return p, errAt(file, a[0].line, "kernel %s: parameter %s: [[%s]] takes no arguments", kname, p.Name, an)
			}
			p.Builtin = an
		case an == "function_constant":
			if len(a) != 4 || a[2].kind != tIdent {
				return p, errAt(file, a[0].line, "kernel %s: parameter %s: [[function_constant(name)]] needs a constant's name", kname, p.Name)
			}
			p.FunctionConstant = a[2].text
		case an == "threadgroup":
			return p, errAt(file, a[0].line, "kernel %s: parameter %s: [[threadgroup(n)]] parameters are not supported (the driver seam has no threadgroup memory length); declare the array inside the kernel", kname, p.Name)
		default:
			return p, errAt(file, a[0].line, "kernel %s: parameter %s: unknown attribute [[%s]]", kname, p.Name, joinToks(a))
		}
	}
	if p.Builtin != "" && p.BufferIndex >= 0 {
		return p, errAt(file, line, "kernel %s: parameter %s: both a buffer and a built-in", kname, p.Name)
	}
	if p.Builtin == "" && p.BufferIndex < 0 && !loose {
		return p, errAt(file, line, "kernel %s: parameter %s has no [[buffer(n)]] or built-in attribute", kname, p.Name)
	}
	if p.Builtin != "" {
		t := strings.ReplaceAll(p.Elem, " ", "")
		n, ok := builtinTypes[t]
		if !ok {
			return p, errAt(file, line, "kernel %s: parameter %s: built-in [[%s]] declared as %q (want uint, ushort or a uint/ushort vector)", kname, p.Name, p.Builtin, p.Type)
		}
		if n > 1 && !builtins[p.Builtin].three {
			return p, errAt(file, line, "kernel %s: parameter %s: built-in [[%s]] is a scalar, declared as %q", kname, p.Name, p.Builtin, p.Type)
		}
	}
	return p, nil
}

// unnamed reports whether the parameter tokens are a bare type (as in an
// explicit instantiation's declaration): they end in * or &, are a single
// token, or end in a type keyword.
func unnamed(body []token) bool {
	if len(body) == 0 {
		return true
	}
	last := body[len(body)-1]
	if last.kind != tIdent || len(body) == 1 {
		return true
	}
	prev := body[len(body)-2].text
	if prev == "const" || prev == "unsigned" || prev == "::" || prev == ":" || addressSpaces[prev] {
		return true
	}
	_, isBuiltinType := builtinTypes[last.text]
	return isBuiltinType || last.text == "float" || last.text == "half" || last.text == "bool"
}

func attrInt(a []token) (int, error) {
	if len(a) != 4 || a[1].text != "(" || a[3].text != ")" {
		return 0, fmt.Errorf("bad attribute")
	}
	s := strings.TrimRight(a[2].text, "uUlL")
	n, err := strconv.ParseInt(s, 0, 32)
	return int(n), err
}

// parseInstantiation parses
//
//	template [[host_name("name")]] [[kernel]] void fn<T...>(params);
//
// at toks[i] == "template". It returns nil for an instantiation that is not
// a kernel's.
func parseInstantiation(file string, toks []token, i int, templates map[string]*Kernel) (*Kernel, []edit, int, error) {
	start := i
	i++
	host := ""
	isKernel := false
	var attrEdits []edit
	for {
		if e, ok := attrAt(toks, i); ok {
			attrEdits = append(attrEdits, edit{toks[i].off, toks[e].end, strings.Repeat(" ", toks[e].end-toks[i].off)})
			for _, a := range attrItems(toks[i+2 : e-1]) {
				if len(a) == 4 && a[0].text == "host_name" && a[2].kind == tString {
					host = strings.Trim(a[2].text, "\"")
				}
				if len(a) == 1 && a[0].text == "kernel" {
					isKernel = true
				}
			}
			i = e + 1
			continue
		}
		if i < len(toks) && toks[i].text == "kernel" {
			isKernel = true
			i++
			continue
		}
		break
	}
	if i+1 >= len(toks) || toks[i].text != "void" || toks[i+1].kind != tIdent {
		return nil, nil, start, nil
	}
	name := toks[i+1].text
	tmpl := templates[name]
	if tmpl == nil && !isKernel {
		return nil, nil, start, nil
	}
	i += 2
	if i >= len(toks) || toks[i].text != "<" {
		return nil, nil, start, nil
	}
	d := 0
	j := i
	for ; j < len(toks); j++ {
		if toks[j].text == "<" {
			d++
		} else if toks[j].text == ">" {
			d--
			if d == 0 {
				break
			}
		}
	}
	targs := joinToks(toks[i : j+1])
	i = j + 1
	if i >= len(toks) || toks[i].text != "(" {
		return nil, nil, start, nil
	}
	line := toks[start].line
	if tmpl == nil {
		return nil, nil, start, errAt(file, line, "instantiation of %s: no template kernel %s declared before it", name, name)
	}
	if host == "" {
		return nil, nil, start, errAt(file, line, "instantiation %s%s of a template kernel needs [[host_name(\"...\")]]", name, targs)
	}
	params, next, err := parseParams(file, host, toks, i, true)
	if err != nil {
		return nil, nil, start, err
	}
	if len(params) != len(tmpl.Params) {
		return nil, nil, start, errAt(file, line, "instantiation %s: %d parameters, the template kernel %s has %d", host, len(params), name, len(tmpl.Params))
	}
	for k := range params {
		t := tmpl.Params[k]
		if params[k].BufferIndex < 0 && params[k].Builtin == "" {
			params[k].BufferIndex = t.BufferIndex
			params[k].Builtin = t.Builtin
		}
		if params[k].Name == "" {
			params[k].Name = t.Name
		}
	}
	k := &Kernel{Name: host, File: file, Line: line, Params: params, MaxThreads: tmpl.MaxThreads, fn: name + targs}
	return k, attrEdits, next, nil
}

// parseConstantDecl recognises, at program scope,
//
//	constant T name [[function_constant(i)]];
//	constant T name = <expression using function constants>;
//
// and returns the declaration with its rewrite, or nils for any other
// constant declaration.
func parseConstantDecl(file, src string, toks []token, i int, fcNames map[string]bool) (*funcConst, *derivedConst, *edit, int, error) {
	// find the end of the declaration
	j := i
	for j < len(toks) && toks[j].text != ";" && toks[j].text != "{" {
		j++
	}
	if j >= len(toks) || toks[j].text != ";" {
		return nil, nil, nil, i, nil
	}
	decl := toks[i+1 : j]
	// function constant?
	for k := 0; k < len(decl); k++ {
		e, ok := attrAt(decl, k)
		if !ok {
			continue
		}
		items := attrItems(decl[k+2 : e-1])
		if len(items) != 1 || len(items[0]) == 0 || items[0][0].text != "function_constant" {
			return nil, nil, nil, i, nil
		}
		a := items[0]
		if len(a) != 4 || a[2].kind != tNumber {
			return nil, nil, nil, i, errAt(file, toks[i].line, "[[function_constant(...)]] needs a constant index")
		}
		idx, err := attrInt(a)
		if err != nil || idx < 0 || idx > 65535 {
			return nil, nil, nil, i, errAt(file, toks[i].line, "bad function constant index %s", a[2].text)
		}
		if k < 2 || decl[k-1].kind != tIdent || e != len(decl)-1 {
			return nil, nil, nil, i, errAt(file, toks[i].line, "cannot parse function constant declaration")
		}
		name := decl[k-1].text
		typ := joinToks(decl[:k-1])
		fc := &funcConst{Name: name, Type: typ, Index: idx, Line: toks[i].line}
		// A read of a constant the dispatch's pipeline does not set fails
		// the dispatch (Pipeline refuses the kernels that visibly read it;
		// this catches reads through templates and types).
		text := fmt.Sprintf("struct forge_fcr_%s { operator %s() const { if (!::forge_rt_fc_def[%d]) ::forge_rt_fault(\"function constant %s (index %d) is read, but the pipeline does not set it\", __FILE__, __LINE__); return *reinterpret_cast<const %s*>(&::forge_rt_fc_bits[%d]); } }; static const forge_fcr_%s %s{}; enum : unsigned { forge_fcidx_%s = %d };",
			name, typ, idx, name, idx, typ, idx, name, name, name, idx)
		text += strings.Repeat("\n", strings.Count(src[toks[i].off:toks[j].end], "\n"))
		return fc, nil, &edit{toks[i].off, toks[j].end, text}, j, nil
	}
	// derived constant: constant T name = expr; with expr using function constants
	eq := -1
	for k, t := range decl {
		if t.text == "=" {
			eq = k
			break
		}
	}
	if eq < 2 || decl[eq-1].kind != tIdent {
		return nil, nil, nil, i, nil
	}
	uses := false
	for _, t := range decl[eq+1:] {
		if t.kind == tIdent && (fcNames[t.text] || t.text == "is_function_constant_defined") {
			uses = true
			break
		}
	}
	if !uses {
		return nil, nil, nil, i, nil
	}
	name := decl[eq-1].text
	var typToks []token
	for _, t := range decl[:eq-1] {
		if t.text != "constexpr" && t.text != "static" {
			typToks = append(typToks, t)
		}
	}
	typ := joinToks(typToks)
	init := src[decl[eq+1].off:toks[j].off]
	d := &derivedConst{name: name, typ: typ, init: init, line: toks[i].line}
	// Evaluated at every use: the value depends on the dispatch's constants.
	text := fmt.Sprintf("struct forge_fcx_%s { operator %s() const { return (%s); } }; static const forge_fcx_%s %s{};",
		name, typ, strings.ReplaceAll(init, "\n", " "), name, name)
	return nil, d, &edit{toks[i].off, toks[j].end, text + strings.Repeat("\n", strings.Count(src[toks[i].off:toks[j].end], "\n"))}, j, nil
}

// parseTGDecl recognises a block-scope `threadgroup T name[N]...;`
// declaration (no pointer, no initializer) and returns its rewrite to a slot
// of the threadgroup's arena; site numbers are assigned by the generator
// (the text holds a placeholder). In the body of a kernel (self, as the
// body names the function), the rewrite also records the declaration's
// size for that function — per instantiation of a template — when the
// library loads, so that Pipeline can check the kernel's static
// threadgroup memory against Metal's limit before any dispatch.
func parseTGDecl(file, src string, toks []token, i int, self string) (*tgDecl, *edit, int, error) {
	j := i + 1
	inDims := false
	for j < len(toks) && toks[j].text != ";" && toks[j].text != "=" && toks[j].text != "{" && (toks[j].text != "(" || inDims) {
		if toks[j].text == "[" {
			inDims = true
		}
		if !inDims && (toks[j].text == "*" || toks[j].text == "&") {
			return nil, nil, i, nil // a pointer or reference to threadgroup memory
		}
		j++
	}
	if j >= len(toks) || toks[j].text != ";" {
		return nil, nil, i, nil
	}
	decl := toks[i+1 : j]
	// name [dims]...
	k := len(decl) - 1
	for k >= 0 && decl[k].text == "]" {
		d := 0
		for ; k >= 0; k-- {
			if decl[k].text == "]" {
				d++
			} else if decl[k].text == "[" {
				d--
				if d == 0 {
					k--
					break
				}
			}
		}
	}
	if k < 1 || decl[k].kind != tIdent {
		return nil, nil, i, nil
	}
	for _, t := range decl[:k] {
		if t.text == "," {
			return nil, nil, i, errAt(file, toks[i].line, "one threadgroup variable per declaration, please")
		}
	}
	var typToks []token
	align := ""
	for m := 0; m < k; m++ {
		if decl[m].text == "alignas" && m+1 < k && decl[m+1].text == "(" {
			n := m + 1
			for n < k && decl[n].text != ")" {
				n++
			}
			align = joinToks(decl[m+2 : n])
			m = n
			continue
		}
		typToks = append(typToks, decl[m])
	}
	typ := joinToks(typToks)
	name := decl[k].text
	dims := ""
	if k+1 < len(decl) {
		dims = src[decl[k+1].off:decl[len(decl)-1].end]
	}
	d := &tgDecl{typ: typ, name: name, dims: dims, line: toks[i].line}
	al := "alignof(" + typ + ")"
	if align != "" {
		al = "(" + align + ")"
	}
	// (No "T (" in the text: vector type names are function-like macros.)
	text := fmt.Sprintf("auto& %s = *(::forge_emu::ptr<threadgroup %s%s>)::forge_rt_tg_slot(@SITE@, sizeof(%s%s), %s, __builtin_FILE(), __builtin_LINE());",
		name, typ, dims, typ, dims, al)
	if self != "" {
		text += fmt.Sprintf(" (void)::forge_emu::tg_static<&%s, @SITE@, sizeof(%s%s), %s>::reg;", self, typ, dims, al)
	}
	text += strings.Repeat("\n", strings.Count(src[toks[i].off:toks[j].end], "\n"))
	return d, &edit{toks[i].off, toks[j].end, text}, j, nil
}

// templateParamNames returns the names declared by a template parameter
// list (`typename T, int N = 4` → T, N).
func templateParamNames(toks []token) []string {
	var names []string
	d := 0
	last := ""
	inDefault := false
	flush := func() {
		if last != "" {
			names = append(names, last)
		}
		last, inDefault = "", false
	}
	for _, t := range toks {
		switch t.text {
		case "<", "(", "[":
			d++
		case ">", ")", "]":
			d--
		case ",":
			if d == 0 {
				flush()
				continue
			}
		case "=":
			if d == 0 {
				inDefault = true
			}
		}
		if d == 0 && !inDefault && t.kind == tIdent {
			last = t.text
		}
	}
	flush()
	return names
}
