package repl

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
)

// "cpu-test" is a second device for the :device tests: a CPU backend of
// its own, so that moving a run to it moves every tensor (forge refuses
// to mix devices) without the emulator's compile time.
func init() {
	backend.Register("cpu-test", func() (backend.Backend, error) { return cpu.New(), nil })
}

// startOnCPU makes the cpu the default device for a test, and the default
// choice to be made again after it.
func startOnCPU(t *testing.T) {
	t.Helper()
	if _, err := forge.UseDevice("cpu", "--device cpu"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forge.SetDefaultDevice(nil) })
}

// TestDeviceTranscript: :device shows the device and why, refuses bad
// names in one line listing the devices, and moves an open run (saved,
// then resumed on the new device) so that training goes on there.
func TestDeviceTranscript(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	startOnCPU(t)
	goldenTranscript(t, "device")
}

// TestDeviceMoveKeepsTraining: a run moved to another device mid-way
// trains on from exactly where it was (model, optimizer, data position),
// every parameter on the new device: its losses are those of a run that
// never moved.
func TestDeviceMoveKeepsTraining(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	startOnCPU(t)
	losses := func(script string) []float64 {
		s, out, dir := newTestSession(t)
		script = strings.ReplaceAll(script, "$DIR", dir)
		for _, line := range strings.Split(script, "\n") {
			if err := s.Eval(line); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		}
		for _, p := range s.Run().Model().Params() {
			if d := p.Tensor.Device(); d != forge.DefaultDevice() {
				t.Errorf("%s is on %s after the move, not %s", p.Name, d, forge.DefaultDevice())
			}
		}
		var l []float64
		for _, m := range s.Run().Trainer().History.Steps {
			l = append(l, m.Loss)
		}
		s.Close()
		return l
	}
	moved := losses(":new $DIR/micro.json $DIR/run\n:step 3\n:device cpu-test\n:step 3")
	if forge.DefaultDevice().Name() != "cpu-test" {
		t.Fatalf("after :device cpu-test the device is %s", forge.DefaultDevice())
	}
	forge.UseDevice("cpu", "--device cpu")
	stayed := losses(":new $DIR/micro.json $DIR/run\n:step 6")
	if len(moved) != 6 || len(stayed) != 6 {
		t.Fatalf("steps: moved %v, stayed %v", moved, stayed)
	}
	for i := range moved {
		if moved[i] != stayed[i] {
			t.Errorf("step %d: loss %v after the move, %v without", i+1, moved[i], stayed[i])
		}
	}
}

// TestDeviceThatDoesNotOpen: a device that fails to open is one line and
// the run stays open where it was.
func TestDeviceThatDoesNotOpen(t *testing.T) {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		t.Skip("metal may open here")
	}
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	startOnCPU(t)
	s, out, dir := newTestSession(t)
	if err := s.Eval(":new " + filepath.Join(dir, "micro.json") + " " + filepath.Join(dir, "run")); err != nil {
		t.Fatal(err)
	}
	err := s.Eval(":device metal")
	if err == nil || !strings.Contains(err.Error(), "the Metal backend needs macOS on Apple silicon") || strings.Contains(OneLine(err), "\n") {
		t.Fatalf(":device metal here: %v\n%s", err, out)
	}
	if s.Run() == nil || forge.DefaultDevice().Name() != "cpu" {
		t.Fatalf("after a failed :device the run is %v on %s", s.Run(), forge.DefaultDevice())
	}
	if err := s.Eval(":step"); err != nil {
		t.Fatalf(":step after a failed :device: %v", err)
	}
}
