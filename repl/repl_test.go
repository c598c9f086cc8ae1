package repl_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/forgeml/forge/cli"
	"github.com/forgeml/forge/repl"
	"github.com/hinshun/vt10x"
)

// TestMain shares one prepared-corpus cache among the tests, and lets the
// test binary act as the forge command for the terminal tests.
func TestMain(m *testing.M) {
	if os.Getenv("FORGE_REPL_TEST_CHILD") == "1" {
		os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
	}
	cache, err := os.MkdirTemp("", "forge-repl-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv("FORGE_CACHE_DIR", cache)
	code := m.Run()
	os.RemoveAll(cache)
	os.Exit(code)
}

func microConfig(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/micro.json")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "micro.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// screen is the forge REPL running in a pseudo-terminal, read through a
// terminal emulator.
type screen struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	term vt10x.Terminal
	done chan struct{}
	mu   sync.Mutex
}

func startScreen(t *testing.T, args ...string) *screen {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FORGE_REPL_TEST_CHILD=1", "TERM=xterm")
	p, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 110})
	if err != nil {
		t.Fatal(err)
	}
	sc := &screen{t: t, cmd: cmd, pty: p, term: vt10x.New(vt10x.WithSize(110, 40), vt10x.WithWriter(p)), done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			if n > 0 {
				sc.term.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		p.Close()
	})
	return sc
}

func (sc *screen) String() string { return sc.term.String() }

// lastLine is the last non-blank line of the screen, trailing spaces kept
// off.
func (sc *screen) lastLine() string {
	lines := strings.Split(sc.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimRight(lines[i], " \x00"); l != "" {
			return l
		}
	}
	return ""
}

func (sc *screen) waitFor(what string, ok func(screen string) bool) string {
	sc.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s := sc.String(); ok(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	sc.t.Fatalf("waiting for %s; the screen:\n%s", what, sc.String())
	return ""
}

func (sc *screen) waitPrompt() {
	sc.t.Helper()
	sc.waitFor("the prompt", func(string) bool { return strings.TrimSpace(sc.lastLine()) == "forge>" })
}

// clearLine presses Ctrl-C until the prompt stands empty (the first may
// only close a completion list).
func (sc *screen) clearLine() {
	sc.t.Helper()
	for range 5 {
		sc.typ("\x03")
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if strings.TrimSpace(sc.lastLine()) == "forge>" {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sc.t.Fatalf("Ctrl-C does not clear the line:\n%s", sc)
}

func (sc *screen) typ(s string) {
	sc.t.Helper()
	if _, err := sc.pty.Write([]byte(s)); err != nil {
		sc.t.Fatal(err)
	}
}

// TestTerminal drives forge repl in a pseudo-terminal: Tab completes a
// command and a method, :step 5 trains, Ctrl-C stops a long :run at a step
// boundary with the run intact and the prompt back, Ctrl-D leaves, and the
// history file holds one line per input.
func TestTerminal(t *testing.T) {
	dir := t.TempDir()
	cfg := microConfig(t, dir)
	hist := filepath.Join(dir, "history")
	run := filepath.Join(dir, "run")
	sc := startScreen(t, "repl", run, "--config", cfg, "--history", hist)
	sc.waitPrompt()
	if !strings.Contains(sc.String(), "created "+run) {
		t.Fatalf("no run created:\n%s", sc)
	}

	// Tab completes a command…
	sc.typ(":st\t")
	sc.waitFor(":st → :step", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> :step") })
	sc.typ("5\r") // Tab ended the command with a space
	sc.waitFor("the :step summary", func(s string) bool { return strings.Contains(s, "steps 0→5 in") })
	sc.waitPrompt()

	// … and a method of a live value.
	sc.typ("tr.StepC\t")
	sc.waitFor("tr.StepC → tr.StepCount", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> tr.StepCount") })
	sc.typ("()\r")
	sc.waitFor("the step count", func(s string) bool {
		return strings.Contains(s, "forge> tr.StepCount()\n5") || strings.Contains(sc.lastLine(), "forge>") && strings.Contains(s, "\n5 ")
	})
	sc.waitPrompt()

	// Tab extends a method name to the candidates' common prefix; a
	// second Tab lists them.
	sc.typ("tr.Ste\t")
	sc.waitFor("tr.Ste → tr.Step", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> tr.Step") })
	sc.typ("\t")
	sc.waitFor("the candidates Step and StepCount", func(s string) bool { return strings.Contains(s, "StepCount") && strings.Contains(s, "\nStep ") })
	sc.clearLine()

	sc.typ(":ru\t")
	sc.waitFor(":ru → :run", func(string) bool { return strings.HasSuffix(sc.lastLine(), "forge> :run") })
	sc.typ("1000000\r")
	sc.waitFor("the live line", func(s string) bool { return strings.Contains(s, "tok/s") && strings.Contains(s, "/1000000)") })
	sc.typ("\x03") // Ctrl-C
	screen := sc.waitFor("the interrupted summary", func(s string) bool { return strings.Contains(s, "interrupted at step") })
	sc.waitPrompt()
	var stopped int
	for _, l := range strings.Split(screen, "\n") {
		if strings.HasPrefix(l, "interrupted at step") {
			fmt.Sscanf(l, "interrupted at step %d", &stopped)
		}
	}
	if stopped <= 5 {
		t.Fatalf("stopped at step %d:\n%s", stopped, screen)
	}

	// The run is intact: the trainer agrees and the checkpoint is there.
	sc.typ("tr.StepCount()\r")
	sc.waitFor("the step count after Ctrl-C", func(s string) bool { return strings.Contains(s, fmt.Sprintf("\n%d ", stopped)) })
	sc.waitPrompt()
	latest, err := os.ReadFile(filepath.Join(run, "checkpoints", "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != fmt.Sprintf("step-%06d", stopped) {
		t.Errorf("checkpoints/latest = %q, %v; want step-%06d", latest, err, stopped)
	}

	// Ctrl-R finds an earlier input.
	sc.typ("\x12StepC")
	sc.waitFor("Ctrl-R's match", func(s string) bool {
		return strings.Contains(s, "tr.StepCount()") && strings.Contains(s, "bck-i-search")
	})
	sc.typ("\x07") // Ctrl-G leaves the search
	sc.clearLine()

	sc.typ("\x04") // Ctrl-D
	select {
	case <-sc.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Ctrl-D did not end the REPL:\n%s", sc)
	}
	if err := sc.cmd.Wait(); err != nil {
		t.Errorf("forge repl exited with %v:\n%s", err, sc)
	}
	b, _ := os.ReadFile(hist)
	want := []string{":step 5", "tr.StepCount()", ":run 1000000", "tr.StepCount()"}
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("history file = %q, want %q", got, want)
	}
}

// TestReplMatchesTrain trains 200 steps from a REPL script, in pieces of
// every size, and `forge train` 200 steps in one go, from the same config
// and seed: the losses of every step are equal. FORGE_REPL_TINY=1 uses
// the tiny config (~1 minute); by default a smaller one.
func TestReplMatchesTrain(t *testing.T) {
	dir := t.TempDir()
	cfg := microConfig(t, dir)
	if os.Getenv("FORGE_REPL_TINY") == "1" {
		cfg = "tiny"
	}
	a, b := filepath.Join(dir, "train"), filepath.Join(dir, "repl")
	var errs bytes.Buffer
	if code := cli.Run([]string{"train", "--config", cfg, "--run", a, "--steps", "200", "--quiet"}, io.Discard, &errs); code != 0 {
		t.Fatalf("forge train: exit %d: %s", code, errs.String())
	}
	var out bytes.Buffer
	s, err := repl.NewSession(&out, &out, repl.Options{Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	script := fmt.Sprintf(":new %s %s\n:step\n:step 9\n:run 40\n:eval\nx := tr.StepCount()\n:run until step >= 150\n:lr\n:run 50\n", cfg, b)
	if err := s.RunLines(strings.NewReader(script)); err != nil {
		t.Fatalf("the script failed: %v\n%s", err, out.String())
	}
	la, lb := readLosses(t, a), readLosses(t, b)
	if len(la) != 200 || len(lb) != 200 {
		t.Fatalf("forge train recorded %d steps, the REPL %d; want 200 each\n%s", len(la), len(lb), out.String())
	}
	for i := range la {
		if la[i] != lb[i] {
			t.Fatalf("step %d: forge train loss %v, REPL %v", i+1, la[i], lb[i])
		}
	}
	t.Logf("%s: 200 equal losses, %.4f → %.4f", cfg, la[0], la[199])
}

func readLosses(t *testing.T, dir string) []float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Step int     `json:"step"`
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Step != len(out)+1 {
			t.Fatalf("%s: record %d is step %d", dir, len(out)+1, m.Step)
		}
		out = append(out, m.Loss)
	}
	return out
}
