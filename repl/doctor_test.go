package repl

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorCommand runs :doctor --short --no-timings: progress lines,
// the verdict and the report's path.
func TestDoctorCommand(t *testing.T) {
	s, out, dir := newTestSession(t)
	if err := s.Eval(":doctor --short --no-timings --out " + dir); err != nil {
		t.Fatalf(":doctor: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "forge-doctor-*.md"))
	if len(files) != 1 {
		t.Fatalf("report files: %v", files)
	}
	got := out.String()
	for _, want := range []string{"doctor: shadow parity: ", "forge doctor: all checks passed", "report written to " + files[0]} {
		if !strings.Contains(got, want) {
			t.Errorf(":doctor output lacks %q:\n%s", want, got)
		}
	}
	if err := s.Eval(":doctor now"); err == nil || !strings.Contains(err.Error(), "no arguments") {
		t.Errorf(":doctor now: %v", err)
	}
}
