package backend_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestUnimplementedCurrent fails when unimplemented.go is not what
// genunimpl writes from backend.go and defaults.go: run go generate in
// forge/backend after changing the Backend interface.
func TestUnimplementedCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs genunimpl")
	}
	out := filepath.Join(t.TempDir(), "unimplemented.go")
	cmd := exec.Command("go", "run", "./internal/genunimpl", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("genunimpl: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("unimplemented.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("unimplemented.go is not current: run `go generate ./forge/backend/`")
	}
}
