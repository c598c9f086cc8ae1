package layout

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportGroups: in every Go file of the module (generated ones
// aside), imports come in groups separated by blank lines, the standard
// library's first and the others after, no group mixing the two.
func TestImportGroups(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	n := 0
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "Code generated") && strings.Contains(string(src), "DO NOT EDIT") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		n++
		lastLine, group, seenOther := 0, 0, false
		var groupStd []bool // per group: standard library or not
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			line := fset.Position(imp.Pos()).Line
			if lastLine == 0 || line > lastLine+1 {
				group++
				groupStd = append(groupStd, isStd(p))
			}
			lastLine = fset.Position(imp.End()).Line
			std := isStd(p)
			bad := ""
			switch {
			case std != groupStd[group-1]:
				bad = fmt.Sprintf("%q is in a group of %s imports", p, kind(groupStd[group-1]))
			case std && seenOther:
				bad = fmt.Sprintf("standard library import %q after the others", p)
			}
			if bad != "" {
				t.Errorf("%s:%d: %s: the standard library's imports go first, the others in a group after them", path, line, bad)
				break // one line a file
			}
			seenOther = seenOther || !std
		}
		return nil
	})
	if n < 100 {
		t.Fatalf("read only %d Go files: is the walk rooted at the module?", n)
	}
}

// isStd reports whether an import path is the standard library's: no dot
// in its first element.
func isStd(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

func kind(std bool) string {
	if std {
		return "standard library"
	}
	return "non-standard"
}
