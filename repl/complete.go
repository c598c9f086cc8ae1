package repl

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/forgeml/forge/forge/profile"
)

// Complete returns the completions of the word that ends at byte pos of
// line, and that word: meta-commands and their arguments (from the command
// table), package members, and the fields and methods of live values
// (model.Wte.We<Tab>). An empty Go word has no completions; a
// meta-command's empty argument lists them all (:plot <Tab>).
func (s *Session) Complete(line string, pos int) (candidates []string, word string) {
	if pos > len(line) || pos < 0 {
		pos = len(line)
	}
	text := line[:pos]
	switch {
	case strings.HasPrefix(text, ":"):
		return s.completeCommand(text[1:])
	case strings.HasPrefix(text, "?:"):
		word = text[2:]
		return withPrefix(commandNames(), word), word
	case strings.HasPrefix(text, "?"):
		text = text[1:]
	}
	return s.completeGo(text)
}

func commandNames() []string {
	out := make([]string, len(commands))
	for i, c := range commands {
		out[i] = c.name
	}
	return out
}

// completeCommand completes a meta-command's name or argument. With no
// prefix typed (":", ":plot ") every candidate is listed; a sole
// candidate that ends a word (not a directory) ends with a space, ready
// for the next argument.
func (s *Session) completeCommand(text string) ([]string, string) {
	name, rest, hasArgs := strings.Cut(text, " ")
	if !hasArgs {
		return wordEnd(withPrefix(commandNames(), name)), name
	}
	c, err := findCommand(name)
	if err != nil || c.complete == nil {
		return nil, ""
	}
	args := fields(rest)
	if strings.HasSuffix(rest, " ") || len(args) == 0 {
		args = append(args, "")
	}
	word := args[len(args)-1]
	return wordEnd(withPrefix(c.complete(s, args), word)), word
}

// wordEnd adds the space after a sole candidate that is a whole word.
func wordEnd(cands []string) []string {
	if len(cands) == 1 && !strings.HasSuffix(cands[0], string(filepath.Separator)) {
		return []string{cands[0] + " "}
	}
	return cands
}

// withPrefix keeps the candidates that start with word, sorted and unique
// (all of them for an empty word).
func withPrefix(cands []string, word string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range cands {
		if strings.HasPrefix(c, word) && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// completeGo completes the identifier or selector chain ending the text.
func (s *Session) completeGo(text string) ([]string, string) {
	i := len(text)
	for i > 0 {
		c := text[i-1]
		if c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			i--
			continue
		}
		break
	}
	expr := text[i:]
	if expr == "" || expr[0] >= '0' && expr[0] <= '9' {
		return nil, ""
	}
	dot := strings.LastIndexByte(expr, '.')
	if dot < 0 {
		if expr == "" {
			return nil, ""
		}
		names := []string{"model", "tr", "run", "ctx", "ans"}
		names = append(names, sortedKeys(packages)...)
		if s.goi != nil {
			for _, n := range sortedKeys(s.goi.names) {
				if !strings.HasPrefix(n, "__") { // the session's temporaries
					names = append(names, n)
				}
			}
		}
		return withPrefix(names, expr), expr
	}
	base, word := expr[:dot], expr[dot+1:]
	if word == "" {
		// After a dot, list every member: the word is the dot's.
		word = ""
	}
	var cands []string
	if path, ok := packages[base]; ok {
		cands = packageMembers(path)
	} else if isSelector(base) {
		g, err := s.interp()
		if err != nil || g.undefined(base) != nil {
			return nil, "" // (evaluating an undefined name would half-declare it)
		}
		v, err := g.i.Eval(base)
		if err != nil {
			return nil, ""
		}
		x := valueOf(v)
		if x == nil {
			if !v.IsValid() {
				return nil, ""
			}
			f, m := members(v.Type())
			cands = append(f, m...)
		} else {
			f, m := members(reflect.TypeOf(x))
			cands = append(f, m...)
		}
	}
	if word == "" {
		sort.Strings(cands)
		return cands, ""
	}
	return withPrefix(cands, word), word
}

// Argument completers of the command table.

func completeCommands(*Session, []string) []string { return commandNames() }

func completeConfigs(_ *Session, args []string) []string {
	if len(args) != 1 {
		return completeDirs(nil, args)
	}
	out := configNames()
	files, _ := filepath.Glob(args[0] + "*.json")
	return append(out, files...)
}

func completeDirs(_ *Session, args []string) []string {
	word := args[len(args)-1]
	matches, _ := filepath.Glob(word + "*")
	var out []string
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			out = append(out, m+string(filepath.Separator))
		}
	}
	return out
}

func completeParams(s *Session, _ []string) []string {
	if s.run == nil {
		return nil
	}
	var out []string
	for _, p := range s.run.Model().Params() {
		out = append(out, p.Name)
	}
	return out
}

func completeMetrics(*Session, []string) []string {
	return append(append([]string{}, metricNames...), "--last", "--browser")
}

func completeBench(s *Session, args []string) []string {
	if len(args) == 2 && args[0] == "step" {
		return configNames()
	}
	out := []string{"step", "--budget"}
	for _, k := range profile.Kernels {
		out = append(out, k.Name)
	}
	return out
}

func completeSettings(_ *Session, args []string) []string {
	if len(args) > 1 {
		if args[0] == "live" {
			return []string{"on", "off"}
		}
		return nil
	}
	var out []string
	for _, d := range settingDocs {
		out = append(out, d.name)
	}
	return out
}
