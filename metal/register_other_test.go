//go:build !(darwin && arm64)

package metal

import (
	"strings"
	"testing"

	"github.com/forgeml/forge/internal/rosetta"
)

// TestOpenGPUUnderRosetta: an amd64 build on Apple silicon is told to get
// the arm64 build, not that Metal needs Apple silicon (which it is on).
func TestOpenGPUUnderRosetta(t *testing.T) {
	prev := translated
	t.Cleanup(func() { translated = prev })
	translated = func() bool { return true }
	_, err := openGPU()
	if err == nil || err.Error() != "metal: "+rosetta.Hint || strings.Contains(err.Error(), "needs macOS on Apple silicon") {
		t.Fatalf("openGPU under Rosetta: %v", err)
	}
	translated = func() bool { return false }
	if _, err := openGPU(); err == nil || !strings.Contains(err.Error(), "needs macOS on Apple silicon") {
		t.Fatalf("openGPU natively off Apple silicon: %v", err)
	}
}
