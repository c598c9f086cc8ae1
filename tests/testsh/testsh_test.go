// Package testsh tests scripts/test.sh, the stage runner of `make test`, on
// small fake stage lists (FORGE_TEST_STAGES_FILE) instead of the real stages.
package testsh

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// run runs scripts/test.sh with the stages of stages (name<TAB>command
// lines) and args, and returns its output, exit status and artifacts dir.
func run(t *testing.T, stages string, args ...string) (out string, code int, art string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("scripts/test.sh is a bash script")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on PATH")
	}
	script, err := filepath.Abs("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Read here so that go test's cache sees the script: a change to it
	// reruns these tests.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	art = filepath.Join(dir, "artifacts")
	file := filepath.Join(dir, "stages")
	if err := os.WriteFile(file, []byte(stages), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FORGE_TEST_STAGES_FILE="+file, "FORGE_ARTIFACTS="+art)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return string(b), code, art
}

// rows returns the summary table's rows by stage name, each as its fields.
func rows(t *testing.T, table string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "stage ") {
		t.Fatalf("no table:\n%s", table)
	}
	m := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		m[f[0]] = f
	}
	return m
}

func summary(t *testing.T, art string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(art, "test", "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A failing stage does not stop the run: the stage after it runs, the table
// names the failing test and its package, and the exit status says FAIL.
func TestFailureDoesNotStopTheRun(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "later-ran")
	stages := "# a fake go test failure, then a stage that passes\n" +
		"unit\tprintf 'ok  \\texample.com/a\\t0.1s\\n--- FAIL: TestX (0.00s)\\n    --- FAIL: TestX/case_2 (0.00s)\\n        x_test.go:9: wrong\\nFAIL\\nFAIL\\texample.com/b\\t0.2s\\nFAIL\\n'; exit 1\n" +
		"\n" +
		"later\techo later output; touch '" + marker + "'\n" +
		"off\tSKIP: not on this machine\n"
	out, code, art := run(t, stages)
	if code != 1 {
		t.Errorf("exit status %d, want 1\n%s", code, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the stage after the failure did not run: %v\n%s", err, out)
	}
	table := summary(t, art)
	if !strings.Contains(out, table) {
		t.Errorf("the terminal does not show the table:\n%s", out)
	}
	r := rows(t, table)
	if f := r["unit"]; len(f) < 6 || f[1] != "FAIL" || f[4] != "TestX/case_2" || f[5] != "(example.com/b)" {
		t.Errorf("unit row %q, want FAIL with TestX/case_2 (example.com/b)\n%s", f, table)
	} else if log := filepath.Join(art, "test", "01-unit.log"); f[3] != log {
		t.Errorf("unit row's log %q, want %q", f[3], log)
	}
	if f := r["later"]; len(f) != 3 || f[1] != "ok" {
		t.Errorf("later row %q, want ok\n%s", f, table)
	}
	if f := r["off"]; len(f) < 3 || f[1] != "skipped" {
		t.Errorf("off row %q, want skipped\n%s", f, table)
	}
	if f := r["total"]; len(f) < 2 || f[1] != "FAIL" {
		t.Errorf("total row %q, want FAIL\n%s", f, table)
	}
	log, err := os.ReadFile(filepath.Join(art, "test", "02-later.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(log), "==> [2/3] later: ") || !strings.Contains(string(log), "later output\n") {
		t.Errorf("02-later.log: no header or no output:\n%s", log)
	}
}

// A stage that fails without go test output is summed up by its first line
// that looks like an error.
func TestFailureWithoutGoTest(t *testing.T) {
	out, code, art := run(t, "lint\techo checking; echo 'gofmt needed:'; echo a.go; exit 2\n")
	if code != 1 {
		t.Errorf("exit status %d, want 1\n%s", code, out)
	}
	if table := summary(t, art); !strings.Contains(table, "gofmt needed: a.go") {
		t.Errorf("the table does not show the error:\n%s", table)
	}
}

func TestAllOK(t *testing.T) {
	out, code, art := run(t, "a\ttrue\nb\techo fine\n")
	if code != 0 {
		t.Errorf("exit status %d, want 0\n%s", code, out)
	}
	r := rows(t, summary(t, art))
	for _, s := range []string{"a", "b", "total"} {
		if f := r[s]; len(f) != 3 || f[1] != "ok" {
			t.Errorf("%s row %q, want ok", s, f)
		}
	}
}

func TestListAndSelect(t *testing.T) {
	stages := "one\tfalse\ntwo\ttrue\nthree\ttrue\n"
	if out, code, _ := run(t, stages, "--list"); code != 0 || out != "one\ntwo\nthree\n" {
		t.Errorf("--list: status %d, output %q", code, out)
	}
	out, code, art := run(t, stages, "t*")
	if code != 0 {
		t.Errorf("t*: exit status %d, want 0 (stage one not run)\n%s", code, out)
	}
	r := rows(t, summary(t, art))
	if _, ok := r["one"]; ok || len(r) != 3 {
		t.Errorf("t*: rows %q, want two, three and total", r)
	}
	if _, err := os.Stat(filepath.Join(art, "test", "03-three.log")); err != nil {
		t.Errorf("t*: %v", err)
	}
	if out, code, _ := run(t, stages, "four"); code != 2 || !strings.Contains(out, "no stage 'four'") {
		t.Errorf("an unknown stage: status %d, output %q", code, out)
	}
}
