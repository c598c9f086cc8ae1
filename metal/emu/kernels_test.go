package emu

import (
	"testing"

	"github.com/forgeml/forge/kernels"
)

// TestKernelsCompile compiles Forge's kernels (package kernels) from
// scratch, reports the compile time, then opens them again from the cache.
func TestKernelsCompile(t *testing.T) {
	if _, _, err := findClang(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("compiles from scratch")
	}
	src := kernels.Sources()
	dir := t.TempDir()
	d, err := Open(src, Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ct, cached := d.CompileTime()
	if cached {
		t.Error("fresh cache dir, but the library came from the cache")
	}
	n := 0
	for name, s := range src {
		ks, err := ParseKernels(name, s)
		if err != nil {
			t.Fatal(err)
		}
		n += len(ks)
	}
	if n != len(d.Kernels()) {
		t.Errorf("ParseKernels found %d kernels, the driver has %d", n, len(d.Kernels()))
	}
	d2, err := Open(src, Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ct2, cached2 := d2.CompileTime()
	if !cached2 {
		t.Error("second Open did not use the cache")
	}
	t.Logf("%s: %d files, %d kernels: compile %v, cached open %v", d.Device(), len(src), n, ct, ct2)
}
