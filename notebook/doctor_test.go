package notebook

import (
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/doctor"
)

// TestDoctor runs notebook.Doctor outside a notebook: the report is
// printed after the progress lines and returned.
func TestDoctor(t *testing.T) {
	var rep *doctor.Report
	var err error
	text := textMode(t, func() { rep, err = Doctor(doctor.Options{Dir: t.TempDir(), Short: true, SkipTimings: true}) })
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("failures: %q", rep.Failures)
	}
	for _, want := range []string{"doctor: conformance: ", "# forge doctor", "report written to " + rep.Path} {
		if !strings.Contains(text, want) {
			t.Errorf("Doctor printed no %q:\n%s", want, text)
		}
	}
}
