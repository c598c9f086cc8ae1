package repl

import (
	"go/ast"
	"go/parser"
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeSection is the text of README.md from the heading that starts
// with title to the next heading of the same level.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+title)
	if i < 0 {
		t.Fatalf("README.md has no heading %q", title)
	}
	s = s[i+1:]
	level := title[:strings.Index(title, " ")+1]
	if j := strings.Index(s[1:], "\n"+level); j >= 0 {
		s = s[:j+1]
	}
	return s
}

var (
	reFence      = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	reInlineCode = regexp.MustCompile("`([^`\n]+)`")
	reHelpDocs   = regexp.MustCompile(`\((\?[^)]*)\)`)
)

// readmeGoExamples are the Go inputs of the README's REPL section: the
// lines after a "forge> " prompt in its transcripts that are not
// :commands, and the calls and operations written inline
// (run.Train(ctx, 100), 1+1).
func readmeGoExamples(t *testing.T) []string {
	sec := readmeSection(t, "## The REPL")
	var out []string
	for _, m := range reFence.FindAllStringSubmatch(sec, -1) {
		for _, line := range strings.Split(m[1], "\n") {
			in, ok := strings.CutPrefix(line, Prompt)
			if !ok || strings.HasPrefix(in, ":") {
				continue
			}
			if strings.HasPrefix(in, "go ") {
				// The crash transcript's goroutine panics on purpose: it would
				// end this test's process, and the supervisor's own tests
				// (supervise_test.go) run it in a child.
				continue
			}
			if i := strings.Index(in, "  #"); i >= 0 { // a comment for the reader
				in = in[:i]
			}
			out = append(out, strings.TrimSpace(in))
		}
	}
	prose := reFence.ReplaceAllString(sec, "")
	for _, m := range reInlineCode.FindAllStringSubmatch(prose, -1) {
		e, err := parser.ParseExpr(m[1])
		if err != nil {
			continue
		}
		switch e := e.(type) {
		case *ast.CallExpr:
			out = append(out, m[1])
		case *ast.BinaryExpr: // 1+1, ans*2; not a path (runs/tiny)
			_, x := e.X.(*ast.BasicLit)
			_, y := e.Y.(*ast.BasicLit)
			if x || y {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// helpGoExamples are the Go in :help's texts: the lookups it lists as
// examples, (?forge.Randn, ?model.Generate, ?:run).
func helpGoExamples(t *testing.T) []string {
	var help []string
	var text strings.Builder
	text.WriteString(helpText(t, ""))
	for _, c := range commands {
		text.WriteString(helpText(t, c.name))
	}
	for _, m := range reHelpDocs.FindAllStringSubmatch(text.String(), -1) {
		help = append(help, strings.Split(m[1], ", ")...)
	}
	return help
}

func helpText(t *testing.T, cmd string) string {
	t.Helper()
	s, out, _ := newTestSession(t)
	in := ":help"
	if cmd != "" {
		in += " " + cmd
	}
	(&feeder{s: s}).line(t.Context(), in)
	return out.String()
}

// Every Go example of the README's REPL section and of :help runs in a
// session on a small run without an error.
func TestDocExamplesRun(t *testing.T) {
	readme, help := readmeGoExamples(t), helpGoExamples(t)
	if len(readme) < 5 || len(help) < 3 {
		t.Fatalf("found %d README examples and %d :help examples; the extraction is broken:\n%q\n%q", len(readme), len(help), readme, help)
	}
	for _, want := range []string{"run.Train(ctx, 100)", "w := model.Wte.Weight", "?model.Generate"} {
		if !strings.Contains(strings.Join(append(readme, help...), "\n"), want) {
			t.Errorf("the examples lack %q: %q %q", want, readme, help)
		}
	}
	script := ":new $DIR/micro.json $DIR/run\n" + strings.Join(readme, "\n") + "\n" + strings.Join(help, "\n") + "\n"
	got, _, _ := runTranscript(t, script)
	// The README shows these being refused; they must still be.
	refused := map[string]bool{"forge.Zeros(100000, 100000)": false}
	lines := strings.Split(got, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "error:") || strings.HasPrefix(l, "panic:") {
			in := strings.TrimPrefix(lines[max(i-1, 0)], Prompt)
			if _, ok := refused[in]; ok && strings.HasPrefix(l, "error:") {
				refused[in] = true
				continue
			}
			t.Errorf("%s\n%s", lines[max(i-1, 0)], l)
		}
	}
	for in, seen := range refused {
		if !seen {
			t.Errorf("the README shows %s refused, but it was not", in)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log("\n" + got)
	}
}
