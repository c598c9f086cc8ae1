package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUseData checks how command-line data arguments become OpenOptions:
// nothing (the built-in corpus), text files (read in order, named in
// Source), one directory (a prepared corpus), and an empty or missing file
// (an error naming it, options unchanged).
func TestUseData(t *testing.T) {
	dir := t.TempDir()
	a, b, empty := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"), filepath.Join(dir, "empty.txt")
	for p, s := range map[string]string{a: "first text", b: "second", empty: ""} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var o OpenOptions
	if err := o.UseData(nil); err != nil || o.Texts != nil || o.Source != "" || o.Prepared != "" {
		t.Errorf("no paths: %v, options %+v", err, o)
	}
	if err := o.UseData([]string{a, b}); err != nil {
		t.Fatal(err)
	}
	if len(o.Texts) != 2 || o.Texts[0] != "first text" || o.Texts[1] != "second" || o.Source != a+","+b || o.Prepared != "" {
		t.Errorf("two files: options %+v", o)
	}
	o = OpenOptions{}
	if err := o.UseData([]string{dir}); err != nil || o.Prepared != dir || o.Texts != nil {
		t.Errorf("a directory: %v, options %+v", err, o)
	}
	for _, bad := range [][]string{{a, empty}, {filepath.Join(dir, "missing.txt")}} {
		o = OpenOptions{}
		err := o.UseData(bad)
		if err == nil || !strings.Contains(err.Error(), filepath.Base(bad[len(bad)-1])) {
			t.Errorf("%v: error %v does not name the bad file", bad, err)
		}
		if o.Texts != nil || o.Source != "" {
			t.Errorf("%v: options changed on error: %+v", bad, o)
		}
	}
}

// TestUseDataDirectoryNotAlone: a prepared directory among other paths is
// an error saying it must be the only --data.
func TestUseDataDirectoryNotAlone(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(f, []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	var o OpenOptions
	if err := o.UseData([]string{f, dir}); err == nil || !strings.Contains(err.Error(), "only --data") {
		t.Errorf("a directory with a file: %v", err)
	}
}
