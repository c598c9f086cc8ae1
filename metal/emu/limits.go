package emu

import "strings"

// Limits Metal enforces at pipeline creation that clang cannot see.

// requiredConsts returns, for each function of a file (by name; a
// template's instantiations share it), the function constants it
// requires: those it reads — named in its body, in the bodies of the
// functions and types it names, transitively, and in the initializers of
// the derived constants it names — that the file never tests with
// is_function_constant_defined. Metal's specialisation
// (newFunctionWithName:constantValues:error:) fails when a required
// constant has no value; a constant the source tests for definition is
// optional, and one that only gates an optional buffer ([[buffer(n),
// function_constant(c)]], a parameter attribute, not part of the body) is
// not read. The analysis is lexical (a name mentioned counts as read), so
// it may only err towards requiring.
func requiredConsts(toks []token, fi *fileInfo) map[string][]funcConst {
	if len(fi.consts) == 0 {
		return nil
	}
	fcs := map[string]funcConst{}
	for _, c := range fi.consts {
		fcs[c.Name] = c
	}
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].text == "is_function_constant_defined" && toks[i+1].text == "(" {
			delete(fcs, toks[i+2].text) // optional
		}
	}
	uses := map[string]map[string]bool{} // unit (function, type, derived constant) → names in it
	add := func(unit string, body []token) {
		if unit == "" {
			return
		}
		m := uses[unit]
		if m == nil {
			m = map[string]bool{}
			uses[unit] = m
		}
		for i := 0; i < len(body); i++ {
			t := body[i]
			if t.kind != tIdent {
				continue
			}
			if t.text == "is_function_constant_defined" && i+1 < len(body) && body[i+1].text == "(" {
				d := 0
				for i++; i < len(body); i++ {
					if body[i].text == "(" {
						d++
					} else if body[i].text == ")" {
						if d--; d == 0 {
							break
						}
					}
				}
				continue
			}
			m[t.text] = true
		}
	}
	for _, d := range fi.derived {
		add(d.name, lex(d.init))
	}
	// Top-level brace blocks: kernel bodies and the bodies of plain helper
	// functions (namespaces are looked into). A type's members, a
	// function template's body and a name defined twice are left out: a
	// specialisation may not read what the primary template reads (Metal
	// requires only what the specialised function uses), and the runtime
	// catches what this misses (a read of an unset constant fails the
	// dispatch).
	kernels := map[string]bool{}
	for _, k := range fi.kernels {
		kernels[kernelFunc(k)] = true
	}
	defs := map[string]int{}
	for i := range toks {
		if toks[i].text == "{" {
			if name, _, _ := blockName(toks, i); name != "" {
				defs[name]++
			}
		}
	}
	for i := 0; i < len(toks); i++ {
		if toks[i].text != "{" {
			continue
		}
		name, ns, plain := blockName(toks, i)
		if ns {
			continue // a namespace's functions are top-level too
		}
		if !kernels[name] && (!plain || defs[name] != 1) {
			name = ""
		}
		// the block's extent
		d, j := 0, i
		for ; j < len(toks); j++ {
			if toks[j].text == "{" {
				d++
			} else if toks[j].text == "}" {
				if d--; d == 0 {
					break
				}
			}
		}
		add(name, toks[i:min(j, len(toks))])
		i = j
	}
	out := map[string][]funcConst{}
	for unit := range uses {
		seen := map[string]bool{unit: true}
		queue := []string{unit}
		got := map[string]bool{}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for n := range uses[u] {
				if _, ok := fcs[n]; ok {
					got[n] = true
				}
				if _, ok := uses[n]; ok && !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		for _, c := range fi.consts { // declaration order
			if got[c.Name] {
				out[unit] = append(out[unit], c)
			}
		}
	}
	return out
}

// blockName names the top-level block opened at toks[i] == "{": the
// function whose body it is, the struct/class/union it defines, or ""; ns
// reports a namespace, plain a function that is not a template.
func blockName(toks []token, i int) (name string, ns, plain bool) {
	j := i - 1
	// skip trailing qualifiers and attributes: ) const, ) [[...]]
	for j >= 0 && (toks[j].text == "const" || toks[j].text == "noexcept" || toks[j].text == "]") {
		if toks[j].text == "]" {
			d := 0
			for ; j >= 0; j-- {
				if toks[j].text == "]" {
					d++
				} else if toks[j].text == "[" {
					if d--; d == 0 {
						break
					}
				}
			}
		}
		j--
	}
	if j >= 0 && toks[j].text == ")" {
		d := 0
		for ; j >= 0; j-- {
			if toks[j].text == ")" {
				d++
			} else if toks[j].text == "(" {
				if d--; d == 0 {
					break
				}
			}
		}
		if j >= 1 && toks[j-1].kind == tIdent {
			plain = true
			for k := j - 2; k >= 0; k-- {
				if t := toks[k].text; t == ";" || t == "}" || t == "{" {
					break
				} else if t == "template" {
					plain = false
				}
			}
			return toks[j-1].text, false, plain
		}
		return "", false, false
	}
	for k := i - 1; k >= 0 && k >= i-12; k-- {
		switch toks[k].text {
		case "namespace":
			return "", true, false
		case "struct", "class", "union":
			if k+1 < i && toks[k+1].kind == tIdent {
				return toks[k+1].text, false, false
			}
			return "", false, false
		case ";", "}", "{":
			return "", false, false
		}
	}
	return "", false, false
}

// kernelFunc is the name of the function a kernel runs (a template's
// name for an instantiation).
func kernelFunc(k Kernel) string {
	if i := strings.IndexByte(k.fn, '<'); i >= 0 {
		return strings.TrimSpace(k.fn[:i])
	}
	return k.fn
}
