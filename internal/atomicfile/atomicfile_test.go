package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteBytes(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o600)
	if err := WriteBytes(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "two" || fi.Mode().Perm() != 0o600 {
		t.Errorf("got %q mode %v", b, fi.Mode())
	}
	// A failing writer leaves the old file and no temporary behind.
	boom := errors.New("boom")
	if err := Write(p, func(w io.Writer) error { w.Write([]byte("partial")); return boom }); err != boom {
		t.Errorf("error %v", err)
	}
	b, _ = os.ReadFile(p)
	ents, _ := os.ReadDir(dir)
	if string(b) != "two" || len(ents) != 1 {
		t.Errorf("after a failed write: %q, %d entries", b, len(ents))
	}
	if err := WriteBytes(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}
