package repl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/forgeml/forge/repl/symbols"
	"github.com/traefik/yaegi/extract"
)

// TestSymbolsCurrent regenerates the interpreter's symbol tables of the
// library (as `go generate ./repl/...` does, with the same yaegi extract)
// and compares them with the committed ones: a library API change without
// a regeneration fails here.
func TestSymbolsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the library from source (~10 s)")
	}
	t.Parallel()
	r := strings.NewReplacer("/", "-", ".", "_", "~", "_")
	var wg sync.WaitGroup
	for _, pkg := range symbols.Packages {
		file := filepath.Join("symbols", r.Replace(pkg)+".go")
		have, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (run go generate ./repl/...)", pkg, err)
			continue
		}
		if !strings.HasPrefix(pkg, "github.com/forgeml/forge/") {
			continue // the standard library's tables carry the Go version's build tag
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var want bytes.Buffer
			ext := extract.Extractor{Dest: "symbols"}
			if _, err := ext.Extract(pkg, "", &want); err != nil {
				t.Errorf("extracting %s: %v", pkg, err)
				return
			}
			if !bytes.Equal(have, want.Bytes()) {
				t.Errorf("%s is out of date with %s: run go generate ./repl/...", file, pkg)
			}
		}()
	}
	wg.Wait()
}
