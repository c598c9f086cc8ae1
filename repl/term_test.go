package repl_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTerminalCompletion presses Tab in a pseudo-terminal: a command name
// completes with the space after it, and an empty argument of :plot and
// :inspect (and a value's members after a dot) lists every candidate
// (issue 18, item 14).
func TestTerminalCompletion(t *testing.T) {
	dir := t.TempDir()
	cfg := microConfig(t, dir)
	sc := startScreen(t, "repl", filepath.Join(dir, "run"), "--config", cfg, "--history", "")
	sc.waitPrompt()

	sc.typ(":pl\t")
	sc.waitFor(":pl → :plot", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> :plot") })
	sc.typ("x") // lands after the space Tab added
	sc.waitFor(":plot x", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> :plot x") })
	sc.clearLine()

	for _, c := range []struct{ line, want string }{
		{":plot ", "tokens_per_sec"},
		{":inspect ", "norm_f.weight"},
		{"model.Wte.", "Weight"}, // a value's members after a dot
	} {
		sc.typ(c.line + "\t\t")
		sc.waitFor(c.line+"<Tab><Tab> lists "+c.want, func(s string) bool {
			return strings.Contains(s, c.want) && !strings.Contains(s, "forge> "+c.line+c.want)
		})
		sc.clearLine()
	}

	// Tab on an empty line or word offers nothing, and the REPL goes on.
	sc.typ("\tx := \t1+1\r")
	sc.waitFor("x := 1+1 evaluated", func(s string) bool {
		for _, l := range strings.Split(s, "\n") {
			if strings.TrimRight(l, " \x00") == "forge> x := 1+1" {
				return true
			}
		}
		return false
	})
	sc.waitPrompt()

	sc.typ("\x04")
	select {
	case <-sc.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Ctrl-D did not end the REPL:\n%s", sc)
	}
}
