package repl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errorLines runs script through the line loop and returns each input
// with the error it printed ("" for none), one "input → error" a line.
func errorLines(t *testing.T, s *Session, out *bytes.Buffer, script string) map[string]string {
	t.Helper()
	got := map[string]string{}
	var last string
	for _, l := range strings.Split(transcript(t, s, out, script, "/nonexistent"), "\n") {
		if in, ok := strings.CutPrefix(l, Prompt); ok {
			last = in
			got[last] = ""
		} else if e, ok := strings.CutPrefix(l, "error: "); ok {
			got[last] = e
		}
	}
	return got
}

// Names that nothing declares are said as Go says them, with the nearest
// known name, whatever the shape of the input (issue 18, item 5).
func TestUndefinedNames(t *testing.T) {
	s, out, _ := newTestSession(t)
	got := errorLines(t, s, out, strings.Join([]string{
		"undefinedThing + 1",
		"froge.Randn(2)",
		"fooo(1)",
		"len(undefinedVar)",
		"y := undefinedThing * 2",
		"undefinedThing",
		"forge.Randnn(2)",
		"myValue := 3",
		"myValeu + 1",
		"func h(a int) int { return a + bb }",
		"for i := 0; i < 3; i++ { fmt.Println(i + nope) }",
		"forge.Ones(2).Nope()",
		// A declaration the interpreter refused declares nothing.
		"w := forge.Ones(\"a\")",
		"w.Sum()",
		// Names that are declared, by the input or the session, resolve.
		"func sq(v float64) float64 { w := v; return w * w }",
		"type P struct{ A int }",
		"p := P{A: 1}",
		"p.A + myValue",
		"for i, v := range []int{1, 2} { _ = i + v }",
		"var a any = 1",
		"func kind(a any) int { switch v := a.(type) { case int: return v + 1 }; return 0 }",
		"sq(2)",
		"import s2 \"strings\"",
		"s2.ToUpper(\"a\")",
	}, "\n"))
	for in, want := range map[string]string{
		"undefinedThing + 1":                  "undefined: undefinedThing",
		"froge.Randn(2)":                      "undefined: froge (did you mean forge?)",
		"fooo(1)":                             "undefined: fooo",
		"len(undefinedVar)":                   "undefined: undefinedVar",
		"y := undefinedThing * 2":             "undefined: undefinedThing",
		"undefinedThing":                      "undefined: undefinedThing",
		"forge.Randnn(2)":                     "undefined: forge.Randnn (did you mean forge.Randn?)",
		"myValeu + 1":                         "undefined: myValeu (did you mean myValue?)",
		"func h(a int) int { return a + bb }": "undefined: bb",
		"for i := 0; i < 3; i++ { fmt.Println(i + nope) }": "undefined: nope",
		"forge.Ones(2).Nope()":                             "forge.Ones(2).Nope undefined (type *forge.Tensor has no field or method Nope)",
		"w.Sum()":                                          "undefined: w",
	} {
		if got[in] != want {
			t.Errorf("%s: error %q, want %q", in, got[in], want)
		}
	}
	for _, in := range []string{"myValue := 3", "func sq(v float64) float64 { w := v; return w * w }", "type P struct{ A int }",
		"p := P{A: 1}", "p.A + myValue", "for i, v := range []int{1, 2} { _ = i + v }", "var a any = 1", "func kind(a any) int { switch v := a.(type) { case int: return v + 1 }; return 0 }", "sq(2)", "import s2 \"strings\"", "s2.ToUpper(\"a\")"} {
		if e, ok := got[in]; !ok || e != "" {
			t.Errorf("%s: error %q, want none", in, e)
		}
	}
}

// The interpreter's own names, types and positions never reach the user
// (issue 18, item 6).
func TestNoInterpreterInternals(t *testing.T) {
	s, out, _ := newTestSession(t)
	got := errorLines(t, s, out, "forge.Arange(6)\nforge.Arange(1, 2, 3, 4)\nvar f float64 = true\nx := 1\nx.Foo\nx()\n"+
		"z := []int{1}\nz[5]\ny :=\n?froge.Randn\n:profile froge.Ones(2)")
	for in, want := range map[string]string{
		"x()":                      "invalid operation: cannot call non-function x (of type int)",
		"forge.Arange(1, 2, 3, 4)": "too many arguments in call to forge.Arange: forge.Arange takes (float64, float64, float64) *forge.Tensor (?forge.Arange documents it)",
		"y :=":                     "syntax error: expected operand, found the end of the input",
		"?froge.Randn":             "?froge.Randn: undefined: froge (did you mean forge?)",
		":profile froge.Ones(2)":   "undefined: froge (did you mean forge?)",
	} {
		if got[in] != want {
			t.Errorf("%s: %q, want %q", in, got[in], want)
		}
	}
	if want := "not enough arguments in call to forge.Arange: forge.Arange takes (float64, float64, float64) *forge.Tensor (?forge.Arange documents it)"; got["forge.Arange(6)"] != want {
		t.Errorf("forge.Arange(6): %q, want %q", got["forge.Arange(6)"], want)
	}
	for in, e := range got {
		for _, leak := range []string{"__", "float64T", "boolT", "CFG", "_.go", "1:", "reflect", "'}'"} {
			if strings.Contains(e, leak) {
				t.Errorf("%s: error %q shows the interpreter's %q", in, e, leak)
			}
		}
	}
	if e := got["x.Foo"]; !strings.Contains(e, "x.Foo undefined (type int has no field or method Foo)") {
		t.Errorf("x.Foo: %q", e)
	}
}

// ans holds the last value: an expression reading it sees it, and looking
// at it keeps it (issue 18, item 7).
func TestAns(t *testing.T) {
	s, out, _ := newTestSession(t)
	got := transcript(t, s, out, "ans\n1+1\nans*2\nans\nans\nsq := func(v int) int { return v * v }\nsq(ans)\nans + 1", "/nonexistent")
	want := "forge> ans\nerror: undefined: ans (it holds the value of the last expression; there is none yet)\nforge> 1+1\n2\nforge> ans*2\n4\nforge> ans\n4\nforge> ans\n4\n" +
		"forge> sq := func(v int) int { return v * v }\nforge> sq(ans)\n16\nforge> ans + 1\n17\n"
	if got != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, want)
	}
}

// quit and exit without the colon leave as :quit does, saving first,
// unless the session declared the name (issue 18, item 10).
func TestLeaveWords(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	for _, word := range []string{"quit", "exit", "exit()"} {
		s, out, dir := newTestSession(t)
		run := filepath.Join(dir, "run")
		script := ":new " + filepath.Join(dir, "micro.json") + " " + run + "\n:set live off\ntr.Step()\n" + word + "\n1+1\n"
		if err := s.RunLines(strings.NewReader(script)); err != nil {
			t.Fatalf("%s: %v\n%s", word, err, out)
		}
		if strings.Contains(out.String(), "\n2\n") {
			t.Errorf("%s did not leave:\n%s", word, out)
		}
		if b, err := os.ReadFile(filepath.Join(run, "checkpoints", "latest")); err != nil || strings.TrimSpace(string(b)) != "step-000001" {
			t.Errorf("%s: checkpoints/latest = %q, %v; want step-000001 (saved on the way out)", word, b, err)
		}
	}
	s, out, _ := newTestSession(t)
	got := transcript(t, s, out, "quit := 3\nquit", "/nonexistent")
	if !strings.HasSuffix(got, "forge> quit\n3\n") {
		t.Errorf("a declared quit is a value:\n%s", got)
	}
}

// :inspect names the parameter that does not exist and the nearest ones;
// :run until says what a condition is (issue 18, item 6).
func TestCommandArgErrors(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, out, dir := newTestSession(t)
	got := errorLines(t, s, out, ":inspect blocks.0.attn.nope\n:new "+filepath.Join(dir, "micro.json")+" "+filepath.Join(dir, "run")+
		"\n:inspect blocks.0.attn.nope\n:inspect norm_f.weigth\n:inspect wte.nope\n:inspect nosuch\n:inspect forge.Ones(2).Nope()\n"+
		":run until loss\n:run until losss < 2\n:run until loss <\n:run until step >= 1")
	for in, want := range map[string]string{
		":inspect blocks.0.attn.nope":   "no parameter blocks.0.attn.nope; the nearest: blocks.0.attn.wo.weight, blocks.0.attn.wqkv.weight (:params lists them)",
		":inspect norm_f.weigth":        "no parameter norm_f.weigth; the nearest: norm_f.weight (:params lists them)",
		":inspect wte.nope":             "no parameter wte.nope; the nearest: wte.weight (:params lists them)",
		":inspect nosuch":               "nosuch is neither a parameter (see :params) nor a Go value: undefined: nosuch",
		":inspect forge.Ones(2).Nope()": "forge.Ones(2).Nope undefined (type *forge.Tensor has no field or method Nope)",
		":run until loss":               "the condition: loss is a float64, not true or false: give a condition such as loss < 2 or step >= 300",
		":run until losss < 2":          "the condition: undefined: losss (did you mean loss?)",
		":run until loss <":             "the condition: syntax error: expected operand, found the end (give a condition such as loss < 2 or step >= 300)",
		":run until step >= 1":          "",
	} {
		if got[in] != want {
			t.Errorf("%s: error %q, want %q", in, got[in], want)
		}
	}
	// Before a run is open, a parameter's name says so.
	s2, out2, _ := newTestSession(t)
	got = errorLines(t, s2, out2, ":inspect blocks.0.attn.nope")
	if want := "blocks.0.attn.nope is not Go, and no run is open: :open <dir> resumes one, :new <config> [dir] starts one"; got[":inspect blocks.0.attn.nope"] != want {
		t.Errorf("no run: %q, want %q", got[":inspect blocks.0.attn.nope"], want)
	}
}

// A script's errors start with the line their input began on (issue 18,
// item 9).
func TestScriptLineNumbers(t *testing.T) {
	var out, errs bytes.Buffer
	s, err := NewSession(&out, &errs, Options{Log: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	script := "x := 1\nfroge.Randn(2)\n# a comment\nfunc f() int {\n\treturn nope\n}\n:bogus\ny := (\n"
	if err := s.RunLines(strings.NewReader(script)); err != ErrInputFailed {
		t.Fatalf("RunLines = %v, want ErrInputFailed", err)
	}
	want := "line 2: error: undefined: froge (did you mean forge?)\n" +
		"line 4: error: undefined: nope\n" +
		"line 7: error: unknown command :bogus; :help lists them\n" +
		"line 8: error: syntax error: unfinished Go input \"y := (\" (a bracket or string is still open)\n"
	if errs.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errs.String(), want)
	}
}

// Reading from a pipe, the REPL says in one line on stderr why there is no
// prompt (issue 18, item 13); reading a string (a test, a library user) it
// says nothing.
func TestPipedNote(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.WriteString("1+1\n")
		w.Close()
	}()
	defer r.Close()
	var out, errs bytes.Buffer
	s, _ := NewSession(&out, &errs, Options{Log: &bytes.Buffer{}})
	defer s.Close()
	if err := s.RunLines(r); err != nil {
		t.Fatal(err)
	}
	if want := "forge repl: reading plain lines because input is not a terminal: no banner, no prompt, no completion; errors name their line\n"; errs.String() != want {
		t.Errorf("stderr %q, want %q", errs.String(), want)
	}
	if out.String() != "2\n" {
		t.Errorf("stdout %q, want 2", out.String())
	}
	errs.Reset()
	if err := s.RunLines(strings.NewReader("1+1\n")); err != nil || errs.Len() != 0 {
		t.Errorf("from a string: %v, stderr %q", err, errs.String())
	}
}
