package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
)

func TestCompileNotice(t *testing.T) {
	var w bytes.Buffer
	f := compileNotice(&w)
	f(forge.CompileProgress{Device: "metal", Done: 7, Total: 13, Elapsed: 1400 * time.Millisecond})
	f(forge.CompileProgress{Device: "metal", Done: 13, Total: 13, Elapsed: 2100 * time.Millisecond, Finished: true})
	want := "compiling metal kernels: 7/13 libraries, 1.4 s\ncompiled metal kernels: 13 libraries in 2.1 s\n"
	if w.String() != want {
		t.Fatalf("got %q, want %q", w.String(), want)
	}
}
