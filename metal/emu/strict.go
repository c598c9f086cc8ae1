package emu

import (
	"sort"
	"strings"
)

// The strict check: MSL that clang compiles through the shim but Apple's
// Metal compiler refuses. The shim makes MSL's types ordinary typedefs and
// its address spaces empty macros, so clang accepts a struct field named
// `half` or a recursive helper; a Mac would fail at the first pipeline.
// strictCheck runs on every source before it is generated, and refuses
// what it can decide from the tokens, naming file:line.
//
// Sources: the Metal Shading Language Specification, §1.4.4
// "Restrictions" (the C++ features MSL lacks), §2.1–2.3 (scalar, vector,
// packed vector and matrix types), §2.6 (atomic types), §2.9–2.10
// (textures, samplers), §4 (address spaces), §5.1 (function qualifiers);
// the section numbers are those of the 3.x editions, cross-checked with
// the MSL keyword table of the naga shader translator (wgpu), which
// cites the same sections and lists the names <metal_types> reserves.
// Left out: `metal`, the standard library's namespace (`metal::` qualifies
// names everywhere), and the names of §2.1 that are also C or C++
// standard typedefs (size_t, ptrdiff_t, int8_t … uint64_t). Attribute
// names (buffer, texture, position, …) are not reserved words: MSL
// allows a variable named buffer.

// mslNames are the names MSL reserves for its own types, address spaces
// and function qualifiers, with the part of the specification that
// defines each; none may name a variable, field, parameter, function,
// type or template parameter.
var mslNames = func() map[string]string {
	m := map[string]string{}
	add := func(section string, names ...string) {
		for _, n := range names {
			m[n] = section
		}
	}
	add("a scalar type (MSL §2.1)", "half", "bfloat", "uchar", "ushort", "uint", "ulong")
	add("a type name reserved by <metal_types>", "llong", "ullong", "quad", "complex", "imaginary")
	elems := []string{"bool", "char", "short", "int", "long", "uchar", "ushort", "uint", "ulong", "half", "bfloat", "float"}
	for _, e := range elems {
		for _, n := range []string{"2", "3", "4"} {
			add("a vector type (MSL §2.2)", e+n)
			add("a packed vector type (MSL §2.2.3)", "packed_"+e+n)
		}
	}
	add("a vector type (MSL §2.2)", "vec")
	add("a packed vector type (MSL §2.2.3)", "packed_vec")
	for _, e := range []string{"half", "float", "bfloat"} {
		for _, c := range []string{"2", "3", "4"} {
			for _, r := range []string{"2", "3", "4"} {
				add("a matrix type (MSL §2.3)", e+c+"x"+r)
			}
		}
	}
	add("a matrix type (MSL §2.3)", "matrix")
	add("an atomic type (MSL §2.6)", "atomic", "atomic_int", "atomic_uint", "atomic_bool", "atomic_ulong", "atomic_float")
	add("a texture type (MSL §2.9)",
		"texture1d", "texture1d_array", "texture2d", "texture2d_array", "texture2d_ms", "texture2d_ms_array",
		"texture3d", "texturecube", "texturecube_array", "texture_buffer",
		"depth2d", "depth2d_array", "depth2d_ms", "depth2d_ms_array", "depthcube", "depthcube_array")
	add("the sampler type (MSL §2.10)", "sampler")
	add("a built-in type of the Metal standard library", "imageblock", "simdgroup_matrix", "visible_function_table",
		"intersection_function_table", "acceleration_structure", "primitive_acceleration_structure",
		"instance_acceleration_structure", "patch_control_point")
	add("the reinterpreting cast (MSL §2.20)", "as_type")
	add("an address space (MSL §4)", "device", "constant", "thread", "threadgroup", "threadgroup_imageblock",
		"ray_data", "object_data")
	add("a function qualifier (MSL §5.1)", "kernel", "vertex", "fragment", "visible", "stitchable")
	return m
}()

// cxxRefused are C++ keywords of features MSL lacks (MSL §1.4.4), with
// what to say.
var cxxRefused = map[string]string{
	"throw":        "exceptions are not part of MSL (MSL §1.4.4): return an error code or a flag instead",
	"try":          "exceptions are not part of MSL (MSL §1.4.4): return an error code or a flag instead",
	"catch":        "exceptions are not part of MSL (MSL §1.4.4): return an error code or a flag instead",
	"new":          "MSL has no new or delete (MSL §1.4.4): use a local, threadgroup memory or a buffer",
	"delete":       "MSL has no new or delete (MSL §1.4.4): use a local, threadgroup memory or a buffer",
	"virtual":      "MSL has no virtual functions (MSL §1.4.4): use a template or a switch",
	"goto":         "MSL has no goto (MSL §1.4.4): use a loop with break or continue",
	"thread_local": "MSL has no thread_local storage (MSL §1.4.4): a function's locals are already per thread",
	"register":     "MSL has no register storage class (MSL §1.4.4): drop it",
	"dynamic_cast": "MSL has no run-time type information (MSL §1.4.4): dynamic_cast is refused",
	"typeid":       "MSL has no run-time type information (MSL §1.4.4): typeid is refused",
	"noexcept":     "MSL has no noexcept (MSL §1.4.4): drop it",
}

// nonTypeWords are keywords that may stand before a type used as a value
// (`return half(x)`), so a reserved name after them is not a declaration.
var nonTypeWords = map[string]bool{
	"return": true, "else": true, "case": true, "do": true, "sizeof": true, "alignof": true,
	"co_return": true, "co_yield": true, "throw": true, "new": true, "delete": true,
	"operator": true, "const": true, "constexpr": true, "static": true, "inline": true,
	"volatile": true, "signed": true, "unsigned": true,
	"device": true, "constant": true, "thread": true, "threadgroup": true, "threadgroup_imageblock": true,
	"ray_data": true, "object_data": true, "kernel": true, "vertex": true, "fragment": true,
	"template": true, "public": true, "private": true, "protected": true, "explicit": true, "friend": true,
	"extern": true, "mutable": true, "auto": true,
}

// lineFiles maps source offsets to file names by the `#line N "name"`
// directives of src (package kernels puts its prelude, each header under
// its own name, before every file).
type lineFiles struct {
	file  string
	offs  []int
	names []string
}

func newLineFiles(file, src string) lineFiles {
	lf := lineFiles{file: file}
	off := 0
	for _, l := range strings.SplitAfter(src, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") {
			f := strings.Fields(strings.TrimPrefix(t, "#"))
			if len(f) > 0 && f[0] == "line" {
				f = f[1:]
			}
			if len(f) >= 2 && f[0] != "" && f[0][0] >= '0' && f[0][0] <= '9' && strings.HasPrefix(f[1], `"`) {
				lf.offs = append(lf.offs, off+len(l))
				lf.names = append(lf.names, strings.Trim(f[1], `"`))
			}
		}
		off += len(l)
	}
	return lf
}

// at returns the file name of the token at byte offset off.
func (lf lineFiles) at(off int) string {
	i := sort.SearchInts(lf.offs, off+1) - 1
	if i < 0 {
		return lf.file
	}
	return lf.names[i]
}

// strictCheckAll checks every source (kernel files and headers, in name
// order) and returns the first refusal.
func strictCheckAll(sources map[string]string) error {
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := strictCheck(n, sources[n]); err != nil {
			return err
		}
	}
	return nil
}

// strictCheck returns an error naming file:line of the first construct of
// src that Apple's Metal compiler refuses and the emulator would accept,
// or nil.
func strictCheck(file, src string) error {
	toks := lex(src)
	lf := newLineFiles(file, src)
	fail := func(t token, format string, args ...any) error {
		return errAt(lf.at(t.off), t.line, format, args...)
	}
	for i, t := range toks {
		if t.kind != tIdent {
			continue
		}
		if msg, ok := cxxRefused[t.text]; ok {
			if t.text == "delete" && tokAt(toks, i-1).text == "=" {
				continue // a deleted function: `S(const S&) = delete;`
			}
			return fail(t, "%s", msg)
		}
		if t.text == "double" || t.text == "long" && (tokAt(toks, i+1).text == "long" || tokAt(toks, i+1).text == "double") {
			return fail(t, "MSL has no double, long double or long long (MSL §2.1): use float, or long (64 bits in MSL)")
		}
		if what, ok := mslNames[t.text]; ok && namesSomething(toks, i) {
			return fail(t, "%q is %s in Metal and cannot name a variable, field, parameter, function or type: rename it (e.g. %s_)", t.text, what, t.text)
		}
	}
	if err := funcPointers(toks, fail); err != nil {
		return err
	}
	fns := functions(toks)
	if err := recursion(toks, fns, fail); err != nil {
		return err
	}
	if err := threadgroupInit(toks, fail); err != nil {
		return err
	}
	return explicitSpaces(toks, fns, fail)
}

func tokAt(toks []token, i int) token {
	if i < 0 || i >= len(toks) {
		return token{kind: tPunct}
	}
	return toks[i]
}

// namesSomething reports whether the reserved name at toks[i] is used as
// a name: a member (`p.half`), or the declared name of a declaration
// (`uint half;`, `float half(float)`, `struct half {`, `typename half`),
// rather than as the type it is (`half x`, `half(x)`, `vec<half, 4>`).
func namesSomething(toks []token, i int) bool {
	prev, next := tokAt(toks, i-1), tokAt(toks, i+1)
	if prev.text == "." || prev.kind == tPunct && prev.text == ">" && tokAt(toks, i-2).text == "-" {
		return true // a member
	}
	switch {
	case prev.kind == tIdent:
		switch prev.text {
		case "struct", "class", "union", "enum", "typename", "using", "namespace":
			return true
		}
		if nonTypeWords[prev.text] {
			return false
		}
		// A type before it: `uint half;`, `float half(float x)`, `uint half : 4;`,
		// `template <int half>`.
		switch next.text {
		case ";", "=", "[", ",", ")", "{", ":", "(", ">":
			return true
		}
	case prev.text == "*" || prev.text == "&" || prev.text == ">" || prev.text == ",":
		// `float* half;`, `vec<float, 2> half;`, `uint a, half;` (not
		// `a * half(2)` or `x > uint(y)`: a conversion).
		switch next.text {
		case ";", "=", "[":
			return true
		case ",", ")":
			return prev.text != ","
		}
	}
	return false
}

// funcPointers refuses a pointer to a function: a declarator or call
// through a pointer of the form `(*name)(` or `(*)(`. (MSL has function
// pointers only through [[visible]] functions and function tables, which
// the emulator does not implement.)
func funcPointers(toks []token, fail func(token, string, ...any) error) error {
	for i := 0; i+3 < len(toks); i++ {
		if toks[i].text != "(" || toks[i+1].text != "*" {
			continue
		}
		j := i + 2
		if toks[j].kind == tIdent {
			j++
		}
		if j+1 < len(toks) && toks[j].text == ")" && toks[j+1].text == "(" {
			return fail(toks[i], "function pointers are not available in MSL as the emulator compiles it (MSL §1.4.4; only [[visible]] functions through function tables, which Forge does not use): call the function directly or switch on a selector")
		}
	}
	return nil
}

// function is a function definition: its name and the token range of its
// body (the braces included).
type function struct {
	name       string
	nameTok    int
	start, end int
}

// functions finds the function definitions of toks, at file scope or in
// a namespace, struct or class body: `name ( … ) [qualifiers] {`.
func functions(toks []token) []function {
	var fns []function
	var stack []bool // open braces: is it a function body (or inside one)?
	inFn := func() bool { return len(stack) > 0 && stack[len(stack)-1] }
	for i := 0; i < len(toks); i++ {
		switch toks[i].text {
		case "{":
			if inFn() {
				stack = append(stack, true)
				continue
			}
			if name, at, ok := definedName(toks, i); ok {
				end := min(closing(toks, i, "{", "}"), len(toks)-1)
				fns = append(fns, function{name: name, nameTok: at, start: i, end: end})
				stack = append(stack, true)
				continue
			}
			stack = append(stack, false)
		case "}":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	return fns
}

// definedName returns the name of the function whose body opens at
// toks[open], if the brace opens one: the tokens before it are `)`, then
// qualifiers (const, thread, device, …) or attributes, and the `(` that
// matches is preceded by the function's name.
func definedName(toks []token, open int) (string, int, bool) {
	j := open - 1
	for j >= 0 {
		if toks[j].kind == tIdent && (toks[j].text == "const" || mslNames[toks[j].text] != "") {
			j--
			continue
		}
		if toks[j].text == "]" && j > 0 && toks[j-1].text == "]" { // [[attr]]
			j = opening(toks, j, "[", "]") - 1
			continue
		}
		break
	}
	if j < 0 || toks[j].text != ")" {
		return "", 0, false
	}
	j = opening(toks, j, "(", ")") - 1
	if j < 0 || toks[j].kind != tIdent {
		return "", 0, false
	}
	switch toks[j].text {
	case "if", "for", "while", "switch", "catch", "return", "sizeof", "alignas", "decltype":
		return "", 0, false
	}
	if tokAt(toks, j-1).text == "operator" { // a conversion: operator half() const { … }
		return "operator " + toks[j].text, j, true
	}
	return toks[j].text, j, true
}

// recursion refuses a function that calls itself, directly or through
// other functions of the file (MSL §1.4.4: Forge's kernels target GPUs
// and language versions without recursion). Overloaded names (a vector
// form calling its scalar form) are not followed: a call cannot be told
// from the tokens alone to be the same overload.
func recursion(toks []token, fns []function, fail func(token, string, ...any) error) error {
	count := map[string]int{}
	for _, f := range fns {
		count[f.name]++
	}
	calls := map[string][]string{}
	site := map[[2]string]token{}
	for _, f := range fns {
		if count[f.name] != 1 {
			continue
		}
		for i := f.start + 1; i < f.end; i++ {
			t := toks[i]
			if t.kind != tIdent || count[t.text] != 1 {
				continue
			}
			p := tokAt(toks, i-1)
			if p.text == "." || p.text == ">" && tokAt(toks, i-2).text == "-" || p.text == ":" && tokAt(toks, i-2).text == ":" {
				continue // a member of another type, or a qualified name (metal::exp)
			}
			n := tokAt(toks, i+1)
			if n.text == "<" { // f<T>(…)
				n = tokAt(toks, skipAngle(toks, i+1)+1)
			}
			if n.text != "(" {
				continue
			}
			key := [2]string{f.name, t.text}
			if _, ok := site[key]; !ok {
				site[key] = t
				calls[f.name] = append(calls[f.name], t.text)
			}
		}
	}
	// A cycle through f: depth-first search from each function in file
	// order, reporting the call that closes the cycle.
	for _, f := range fns {
		if count[f.name] != 1 {
			continue
		}
		path := []string{f.name}
		seen := map[string]bool{}
		var dfs func(n string) []string
		dfs = func(n string) []string {
			for _, c := range calls[n] {
				if c == f.name {
					return append(append([]string(nil), path...), c)
				}
				if seen[c] {
					continue
				}
				seen[c] = true
				path = append(path, c)
				if p := dfs(c); p != nil {
					return p
				}
				path = path[:len(path)-1]
			}
			return nil
		}
		if cyc := dfs(f.name); cyc != nil {
			t := site[[2]string{f.name, cyc[1]}]
			if len(cyc) == 2 {
				return fail(t, "%s calls itself: MSL has no recursion (MSL §1.4.4): write it as a loop", f.name)
			}
			return fail(t, "%s is recursive (%s): MSL has no recursion (MSL §1.4.4): write it as a loop", f.name, strings.Join(cyc, " → "))
		}
	}
	return nil
}

// skipAngle returns the index of the `>` that closes the `<` at toks[i],
// or i when the angle brackets do not close before a `;`, `{` or `}`.
func skipAngle(toks []token, i int) int {
	d := 0
	for j := i; j < len(toks); j++ {
		switch toks[j].text {
		case "<":
			d++
		case ">":
			d--
			if d == 0 {
				return j
			}
		case ";", "{", "}":
			return i
		}
	}
	return i
}

// threadgroupInit refuses a threadgroup variable declared with an
// initializer (MSL §4.4 describes threadgroup memory as shared by the
// threadgroup and not initialised, and Apple's compiler, like OpenCL's
// for __local, refuses an initializer: write it from the threads, then
// barrier). The emulator's rewrite of threadgroup
// declarations leaves such a declaration alone, and the shim's empty
// `threadgroup` made it an ordinary initialised local.
func threadgroupInit(toks []token, fail func(token, string, ...any) error) error {
	for i, t := range toks {
		if t.kind != tIdent || t.text != "threadgroup" {
			continue
		}
		p := tokAt(toks, i-1)
		if !(p.text == ";" || p.text == "{" || p.text == "}" || p.text == ":" || p.text == ")" || p.text == "static") {
			continue // a parameter, cast or template argument
		}
		paren := 0
		for j := i + 1; j < len(toks); j++ {
			s := toks[j].text
			if s == "(" || s == "[" {
				paren++
			} else if s == ")" || s == "]" {
				paren--
			}
			if paren < 0 || s == ";" || s == "{" && paren == 0 {
				break
			}
			if paren == 0 && (s == "*" || s == "&") {
				break // a pointer or reference to threadgroup memory
			}
			if paren == 0 && s == "=" {
				return fail(toks[j], "a threadgroup variable cannot have an initializer (MSL §4.4): declare it, write it from the threads, then threadgroup_barrier")
			}
		}
	}
	return nil
}

// addrSpaces is the set of MSL address-space keywords (MSL §4).
var addrSpaces = map[string]bool{
	"device": true, "constant": true, "thread": true, "threadgroup": true,
	"threadgroup_imageblock": true, "ray_data": true, "object_data": true,
}

// explicitSpaces refuses a pointer or reference without an address space
// (MSL §4: "pointer type must have explicit address space qualifier", as
// Apple's compiler says) where the tokens decide it: a parameter of a
// function definition, a cast `(T*)x` and a local declaration `T* p = …`
// at the start of a statement. The shim's address spaces are empty
// macros, so clang took them as plain C++ pointers. A pointee that is a
// template parameter is left alone (its address space may come with the
// type argument), as is auto.
func explicitSpaces(toks []token, fns []function, fail func(token, string, ...any) error) error {
	tparams := map[string]bool{"auto": true}
	for i := 0; i+1 < len(toks); i++ {
		if (toks[i].text == "typename" || toks[i].text == "class") && toks[i+1].kind == tIdent {
			if p := tokAt(toks, i-1).text; p == "<" || p == "," {
				tparams[toks[i+1].text] = true
			}
		}
	}
	// check looks at type tokens ts (up to the * or & at toks[star]).
	check := func(ts []token, star token, what string) error {
		for _, t := range ts {
			if addrSpaces[t.text] || tparams[t.text] {
				return nil
			}
		}
		kind := "pointer"
		if star.text == "&" {
			kind = "reference"
		}
		return fail(star, "%s %s has no address space: write device, constant, threadgroup or thread before the type (MSL §4; Apple's compiler refuses it)", kind, what)
	}
	// Parameters of function definitions.
	for _, f := range fns {
		open := f.nameTok + 1
		if tokAt(toks, open).text != "(" {
			continue
		}
		close := closing(toks, open, "(", ")")
		start, angle, paren := open+1, 0, 0
		for j := open + 1; j <= close; j++ {
			s := toks[j].text
			switch {
			case s == "<":
				angle++
			case s == ">" && angle > 0:
				angle--
			case s == "(" || s == "[":
				paren++
			case (s == ")" || s == "]") && j < close:
				paren--
			}
			if j == close || s == "," && angle == 0 && paren == 0 {
				param := toks[start:j]
				start = j + 1
				if k := pointerAt(param); k >= 0 {
					if err := check(param[:k], param[k], "parameter"); err != nil {
						return err
					}
				}
			}
		}
	}
	for i := 0; i+2 < len(toks); i++ {
		// A cast: ( [const] T [<…>] * ) followed by an operand.
		if toks[i].text == "(" && toks[i+1].kind == tIdent && (!nonTypeWords[toks[i+1].text] || toks[i+1].text == "const") {
			j := i + 1
			for j < len(toks) && (toks[j].kind == tIdent || toks[j].text == ":") {
				j++
			}
			if j < len(toks) && toks[j].text == "<" {
				j = skipAngle(toks, j) + 1
			}
			if j+1 < len(toks) && (toks[j].text == "*" || toks[j].text == "&") && toks[j+1].text == ")" && j > i+1 &&
				tokAt(toks, i-1).text != "sizeof" {
				n := tokAt(toks, j+2)
				if n.kind == tIdent || n.kind == tNumber || n.text == "(" || n.text == "&" {
					if err := check(toks[i+1:j], toks[j], "in a cast"); err != nil {
						return err
					}
				}
			}
		}
		// A local declaration at the start of a statement: T* p = …; / T* p;
		if p := tokAt(toks, i-1).text; (p == ";" || p == "{" || p == "}") && toks[i].kind == tIdent &&
			(!nonTypeWords[toks[i].text] && !stmtWords[toks[i].text] || toks[i].text == "const") {
			j := i
			for j < len(toks) && (toks[j].kind == tIdent || toks[j].text == ":") && !stmtWords[toks[j].text] {
				j++
			}
			if j < len(toks) && toks[j].text == "<" {
				j = skipAngle(toks, j) + 1
			}
			if j+2 < len(toks) && j > i && (toks[j].text == "*" || toks[j].text == "&") && toks[j+1].kind == tIdent {
				switch toks[j+2].text {
				case "=", ";", "[":
					if err := check(toks[i:j], toks[j], "variable"); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// stmtWords begin statements that are not declarations.
var stmtWords = map[string]bool{
	"if": true, "for": true, "while": true, "switch": true, "return": true, "break": true,
	"continue": true, "using": true, "typedef": true, "struct": true, "class": true, "enum": true,
	"namespace": true, "template": true, "static_assert": true, "else": true, "do": true, "case": true,
	"default": true, "public": true, "private": true, "protected": true,
}

// pointerAt returns the index of the first `*` or `&` of a parameter's
// tokens outside angle brackets (a pointer or reference), or −1; `&&` and
// a default argument after `=` do not count.
func pointerAt(param []token) int {
	angle := 0
	for k, t := range param {
		switch t.text {
		case "<":
			angle++
		case ">":
			angle--
		case "=", "[":
			return -1
		case "*", "&":
			if angle == 0 {
				if t.text == "&" && k+1 < len(param) && param[k+1].text == "&" {
					return -1
				}
				return k
			}
		}
	}
	return -1
}
