//go:build unix

package repl_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// piped is `forge repl` (the test binary standing in for it) reading a
// pipe the test writes line by line.
type piped struct {
	t        *testing.T
	cmd      *exec.Cmd
	in       io.WriteCloser
	out, err syncBuffer
}

func startPiped(t *testing.T, args ...string) *piped {
	t.Helper()
	return startCmd(t, exec.Command(os.Args[0], args...))
}

// startCmd starts cmd, the test binary standing in for forge, with its
// input piped and its output collected.
func startCmd(t *testing.T, cmd *exec.Cmd) *piped {
	t.Helper()
	p := &piped{t: t, cmd: cmd}
	p.cmd.Env = append(os.Environ(), "FORGE_REPL_TEST_CHILD=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

func (p *piped) send(lines ...string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, strings.Join(lines, "\n")+"\n"); err != nil {
		p.t.Fatalf("writing %q: %v\nstdout:\n%s\nstderr:\n%s", lines, err, &p.out, &p.err)
	}
}

func (p *piped) waitFor(what string, in *syncBuffer, ok func(string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s := in.String(); ok(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("waiting for %s\nstdout:\n%s\nstderr:\n%s", what, &p.out, &p.err)
	return ""
}

// end closes the input and returns the exit status.
func (p *piped) end() int {
	p.t.Helper()
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("the REPL did not end at the end of its input\nstdout:\n%s\nstderr:\n%s", &p.out, &p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestSupervisorSurvivesGoroutinePanic panics in a goroutine started from
// the REPL while :run trains: the process survives, says what happened
// and what was lost (the Go variables, the steps since the last save),
// reopens the run at its last saved step, and goes on with the next
// input; the end of the input leaves with status 0 (issue 18, item 2).
func TestSupervisorSurvivesGoroutinePanic(t *testing.T) {
	dir := t.TempDir()
	p := startPiped(t, "repl", filepath.Join(dir, "run"), "--config", microConfig(t, dir), "--history", "")
	p.send(":step 3", "x := 5", `go func() { time.Sleep(300 * time.Millisecond); panic("x") }()`, ":run 1000000")
	stderr := p.waitFor("the restart", &p.err, func(s string) bool { return strings.Contains(s, "forge repl: restarted;") })
	if !strings.Contains(stderr, "forge repl: the session died (panic: x); starting it again") {
		t.Errorf("no line saying the session died of panic: x:\n%s", stderr)
	}
	m := regexp.MustCompile(`restarted; lost the Go variables x and steps 4–(\d+) \(not saved\); the run is back at step 3, its last save`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the restart line does not say what was lost:\n%s", stderr)
	}
	if n, _ := strconv.Atoi(m[1]); n < 4 {
		t.Errorf("lost steps up to %d", n)
	}
	p.send(":step 2", "y := 40 + 2", "y")
	p.waitFor("the session going on", &p.out, func(s string) bool { return strings.Contains(s, "steps 3→5 in") && strings.Contains(s, "\n42\n") })
	if code := p.end(); code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, &p.err)
	}
	if !strings.Contains(p.out.String(), "resumed "+filepath.Join(dir, "run")) {
		t.Errorf("the run was not reopened:\n%s", &p.out)
	}
}

// TestSupervisorSurvivesStackOverflow recurses without end: Go's fatal
// "stack overflow" ends the evaluating process, and the REPL goes on with
// the run reopened (issue 18, item 2).
func TestSupervisorSurvivesStackOverflow(t *testing.T) {
	if testing.Short() {
		t.Skip("a stack overflow grows a 1 GB stack first (seconds)")
	}
	dir := t.TempDir()
	p := startPiped(t, "repl", filepath.Join(dir, "run"), "--config", microConfig(t, dir), "--history", "")
	p.send(":step 2", "var f func(int) int", "f = func(n int) int { return f(n+1) + 1 }", "f(0)")
	stderr := p.waitFor("the restart", &p.err, func(s string) bool { return strings.Contains(s, "forge repl: restarted;") })
	for _, want := range []string{
		"forge repl: the session died (fatal error: stack overflow); starting it again",
		"restarted; lost the Go variables f; the run is back at step 2, its last save",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("no %q in:\n%s", want, stderr)
		}
	}
	p.send(":step 1", ":quit")
	if code := p.end(); code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, &p.err)
	}
	if !strings.Contains(p.out.String(), "steps 2→3 in") {
		t.Errorf("the session did not go on:\n%s", &p.out)
	}
}

// TestSupervisorTerminal panics in a goroutine at the prompt of a
// terminal: the terminal comes back usable (line editing, the prompt),
// the run is reopened, and :quit leaves with status 0.
func TestSupervisorTerminal(t *testing.T) {
	dir := t.TempDir()
	sc := startScreen(t, "repl", filepath.Join(dir, "run"), "--config", microConfig(t, dir), "--history", "")
	sc.waitPrompt()
	sc.typ(":step 2\r")
	sc.waitFor("the :step summary", func(s string) bool { return strings.Contains(s, "steps 0→2 in") })
	sc.waitPrompt()
	sc.typ(`go func() { panic("boom") }()` + "\r")
	sc.waitFor("the restart", func(s string) bool {
		return strings.Contains(s, "the session died (panic: boom)") && strings.Contains(s, "the run is back at step 2")
	})
	sc.waitPrompt()
	sc.typ(":st\t1\r") // completion works: the terminal is in order
	sc.waitFor("the session going on", func(s string) bool { return strings.Contains(s, "steps 2→3 in") })
	sc.waitPrompt()
	sc.typ(":quit\r")
	select {
	case <-sc.done:
	case <-time.After(30 * time.Second):
		t.Fatalf(":quit did not end the REPL:\n%s", sc)
	}
	sc.cmd.Wait()
	if code := sc.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", code, sc)
	}
}

// TestSupervisorPassesInterrupt sends SIGINT to the supervisor alone (as
// kill does; a terminal's Ctrl-C signals both processes): the session's
// :run stops at a step boundary, saves, and the session goes on.
func TestSupervisorPassesInterrupt(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	cmd := exec.Command(os.Args[0], "repl", run, "--config", microConfig(t, dir), "--history", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not in a terminal's foreground
	p := startCmd(t, cmd)
	p.send(":run 1000000")
	deadline := time.Now().Add(60 * time.Second)
	for lastLoggedSteps(filepath.Join(run, "metrics.jsonl")) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.cmd.Process.Signal(os.Interrupt)
	p.waitFor("the interrupted summary", &p.out, func(s string) bool { return strings.Contains(s, "interrupted at step") })
	p.send("1+1")
	p.waitFor("the session going on", &p.out, func(s string) bool { return strings.Contains(s, "\n2\n") })
	if code := p.end(); code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, &p.err)
	}
}

// lastLoggedSteps counts the lines of a metrics log.
func lastLoggedSteps(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}
