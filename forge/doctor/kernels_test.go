package doctor

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal"
	"github.com/forgeml/forge/metal/emu"
)

// fileCompiler is the emulator with the GPU driver's compile-on-demand
// interface (driver.LibraryCompiler): it records the files asked for and
// fails one, so the GPU's branch of the kernel section runs here.
type fileCompiler struct {
	*emu.Driver
	asked []string
	fail  string
}

func (f *fileCompiler) CompileLibrary(file string) (string, error) {
	f.asked = append(f.asked, file)
	if file == f.fail {
		return "", errors.New("metal: compiling " + file + ":\n" + file + ":34:8: error: 'half' is a type name")
	}
	return "MSL 3.1", nil
}

// TestKernelsFileByFile: on a driver that compiles file by file, the
// kernel section compiles every .metal file (the headers aside), lists
// each with its language, and fails naming the file that did not compile.
func TestKernelsFileByFile(t *testing.T) {
	fc := &fileCompiler{fail: "rope.metal"}
	backend.Register("metal-filecompiler-test", func() (backend.Backend, error) {
		d, err := emu.Open(kernels.Sources(), emu.Options{Log: os.Stderr})
		if err != nil {
			return nil, err
		}
		fc.Driver = d
		return metal.New(fc), nil
	})
	dev := openDevice(t, "metal-filecompiler-test")
	r := &run{dev: dev}
	r.kernels()
	var want []string
	for f := range kernels.Sources() {
		if strings.HasSuffix(f, ".metal") {
			want = append(want, f)
		}
	}
	slices.Sort(want)
	if !slices.Equal(fc.asked, want) {
		t.Errorf("compiled %v, want every kernel file %v", fc.asked, want)
	}
	text := r.b.String()
	if !strings.Contains(text, "- binary.metal       MSL 3.1") {
		t.Errorf("binary.metal not listed with its language:\n%s", text)
	}
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "kernel file rope.metal does not compile") || !strings.Contains(r.failures[0], "rope.metal:34:8") {
		t.Errorf("failures %q, want one naming rope.metal and its line", r.failures)
	}
	if !strings.Contains(text, "files, 1 failed") {
		t.Errorf("no count of failed files:\n%s", text)
	}
}
