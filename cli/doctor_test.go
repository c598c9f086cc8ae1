package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctor runs `forge doctor --short` on the cpu: the report on
// stdout and in one file under --out, progress on stderr, exit 0; an
// argument is a usage error.
func TestDoctor(t *testing.T) {
	t.Setenv("FORGE_BACKEND", "cpu")
	dir := t.TempDir()
	r := runCLI("doctor", "--short", "--out", dir)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "forge-doctor-cpu-*.md"))
	if len(files) != 1 {
		t.Fatalf("report files in --out: %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# forge doctor", "## Shadow parity", "all checks passed"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if !strings.Contains(r.stdout, "report written to "+files[0]) || !strings.Contains(r.stdout, string(b)) {
		t.Errorf("stdout lacks the report or its path:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "doctor: conformance: ") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	if r := runCLI("doctor", "now"); r.code != 2 || !strings.Contains(r.stderr, "doctor takes no arguments") {
		t.Errorf("forge doctor now: exit %d, stderr %q", r.code, r.stderr)
	}
}
