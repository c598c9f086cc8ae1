package repl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/train"
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

// slowConfig writes a config whose step takes long enough (tens of
// milliseconds) for a second Ctrl-C to land while a step runs.
func slowConfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "slow.json")
	cfg := `{"name": "slow", "model": {"vocab": 512, "context": 64, "d_model": 96, "n_layer": 2, "n_head": 2, "ffn_hidden": 256},
		"batch": 32, "steps": 100000, "lr": 3e-3, "warmup": 5, "eval_every": 0, "save_every": 0}`
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDoubleInterruptSaves presses Ctrl-C twice during :run: the REPL
// waits for the step in flight, saves, says which step and leaves with
// status 130; the run reopens at that step, at or past the step the live
// line showed (issue 18, item 3: it used to leave at once, losing the
// steps since the last save).
func TestDoubleInterruptSaves(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	sc := startScreen(t, "repl", run, "--config", slowConfig(t, dir), "--history", "")
	sc.waitPrompt()
	live := 0
	// Two signals close together may merge into one, or the second may
	// come after the first stopped the run: then the prompt is back, and
	// the test tries again.
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatalf("the second Ctrl-C never landed during :run:\n%s", sc)
		}
		sc.typ(":run 100000\r")
		sc.waitFor("the live line past step 3", func(s string) bool {
			for _, l := range strings.Split(s, "\n") {
				var step int
				if _, err := fmt.Sscanf(strings.TrimSpace(l), "step %d (", &step); err == nil && step > live+3 {
					live = step
					return true
				}
			}
			return false
		})
		sc.typ("\x03")
		time.Sleep(time.Duration(5+10*try) * time.Millisecond)
		sc.typ("\x03")
		ended := false
		sc.waitFor("the REPL leaving or the prompt", func(s string) bool {
			select {
			case <-sc.done:
				ended = true
				return true
			default:
			}
			return strings.TrimSpace(sc.lastLine()) == "forge>" && strings.Contains(s, "interrupted at step")
		})
		if ended {
			break
		}
	}
	sc.cmd.Wait()
	if code := sc.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit status %d, want 130", code)
	}
	var saved int
	for _, l := range strings.Split(sc.String(), "\n") {
		if i := strings.Index(l, "interrupted twice: saved step "); i >= 0 {
			fmt.Sscanf(l[i:], "interrupted twice: saved step %d, leaving", &saved)
		}
	}
	if saved < live {
		t.Fatalf("saved step %d, the live line showed %d:\n%s", saved, live, sc)
	}
	r, err := train.Open(run, train.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Trainer().StepCount(); got != saved {
		t.Fatalf("the run reopens at step %d, want %d", got, saved)
	}
}
