package doctor

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/metal/emu"
)

// openDevice opens name, skipping the test where the emulator cannot run.
func openDevice(t *testing.T, name string) *forge.Device {
	t.Helper()
	dev, err := forge.OpenDevice(name)
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skipf("%s: %v", name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// runDoctor runs the whole doctor on dev with short timings and checks
// the report file against the returned text and the sections every report
// has.
func runDoctor(t *testing.T, dev *forge.Device) *Report {
	t.Helper()
	var progress strings.Builder
	rep, err := Run(Options{Device: dev, Dir: t.TempDir(), Progress: &progress, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rep.Path)
	if err != nil {
		t.Fatalf("the report file: %v", err)
	}
	if string(b) != rep.Text {
		t.Errorf("the report file differs from Report.Text")
	}
	for _, want := range []string{
		"## Machine", "- CPU: ", "- CPU reference (BLAS and core): cpu: ",
		"## Kernels", "## Conformance", "ok torch matmul/", "ok grad  matmul/",
		"## Shadow parity", "every kernel output within tolerance", "attention.backward", "adamw",
		"## Timings", "| 4096³ | nn |", "seed (M-series GPU: M5 Max)", "9.49", "7.05", "38200",
		"## Verdict", "all checks passed",
	} {
		if !strings.Contains(rep.Text, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if !rep.OK() {
		t.Errorf("failures: %q", rep.Failures)
	}
	if !strings.Contains(progress.String(), "doctor: shadow parity: ") || !strings.Contains(progress.String(), "doctor: timing: GEMM") {
		t.Errorf("progress lines missing:\n%s", progress.String())
	}
	if testing.Verbose() {
		t.Log(rep.Text)
	}
	return rep
}

func TestDoctorCPU(t *testing.T) {
	rep := runDoctor(t, openDevice(t, "cpu"))
	for _, want := range []string{"there are no kernels to compile", "the comparison checks the harness", "cpu is not an Apple GPU"} {
		if !strings.Contains(rep.Text, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

func TestDoctorEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a training step on the emulator")
	}
	rep := runDoctor(t, openDevice(t, "metal-emu"))
	for _, want := range []string{"metal-emu compiles all", "rope.metal", "matmul2d.metal", "- GPU family: none, an emulator", "nothing here ran on an Apple GPU",
		"its times measure the emulation"} {
		if !strings.Contains(rep.Text, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The emulator's kernels differ from the CPU's in their last bits:
	// some kernel must show a nonzero difference, or the comparison
	// compared nothing.
	nonzero := false
	for _, w := range rep.Shadow.Worst {
		nonzero = nonzero || w > 0
	}
	if !nonzero {
		t.Errorf("every kernel identical on metal-emu and the cpu: %v", rep.Shadow.Worst)
	}
}

// tamper returns a Tamper that changes one element of output `out` of the
// nth call (0-based) of kernel by rel times the output's largest
// magnitude, and reports the call's index in the step through *at.
func tamper(kernel string, nth, out int, rel float64, at *int) func(forge.KernelCall, []*forge.Tensor) {
	calls, seen := 0, 0
	return func(c forge.KernelCall, outs []*forge.Tensor) {
		calls++
		if c.Kernel != kernel {
			return
		}
		seen++
		if seen-1 != nth {
			return
		}
		*at = calls - 1
		o := outs[out]
		v := o.Float32s()
		big := float32(0)
		for _, x := range v {
			big = max(big, x, -x)
		}
		v[len(v)/2] += float32(rel) * big
		forge.NoGrad(func() { o.CopyFrom(forge.FromSlice(v, len(v)).Reshape(o.Shape()...).To(o.Device())) })
	}
}

// TestShadowNamesTamperedKernel plants a wrong result in one kernel of
// the device's step — a forward norm, an attention backward's dK, a
// weight gradient's matmul — and checks that shadow parity names exactly
// that call and no later one (the CPU is fed the device's values, so the
// error does not propagate into other kernels' verdicts).
func TestShadowNamesTamperedKernel(t *testing.T) {
	devs := []string{"cpu"}
	if !testing.Short() {
		devs = append(devs, "metal-emu")
	}
	cases := []struct {
		kernel   string
		nth, out int
		rel      float64
		phase    forge.Phase
	}{
		{"rms_norm", 3, 0, 1e-3, forge.PhaseForward},
		{"attention.backward", 1, 1, 3e-2, forge.PhaseBackward},
		{"matmul", 20, 0, 1e-3, forge.PhaseBackward},
		{"adamw_clipped", 5, 0, 1e-4, forge.PhaseOptimizer},
	}
	for _, name := range devs {
		dev := openDevice(t, name)
		for _, c := range cases {
			if name != "cpu" && c.kernel != "attention.backward" {
				continue // one case on the emulator: each step takes seconds there
			}
			t.Run(name+"/"+c.kernel, func(t *testing.T) {
				at := -1
				sh, err := runShadow(dev, tamper(c.kernel, c.nth, c.out, c.rel, &at), func(string, ...any) {})
				if err != nil {
					t.Fatal(err)
				}
				if at < 0 {
					t.Fatalf("the step has no call %d of %s", c.nth, c.kernel)
				}
				if sh.First == nil {
					t.Fatalf("a %.0e error in call #%d (%s) went unnoticed; worst ratios %v", c.rel, at, c.kernel, sh.Worst)
				}
				f := sh.First
				if f.Kernel != c.kernel || f.Index != at || f.Output != c.out || f.Phase != c.phase {
					t.Errorf("shadow parity named %s, want kernel #%d %s output %d (%s)", f, at, c.kernel, c.out, c.phase)
				}
				if sh.Beyond != 1 {
					t.Errorf("%d outputs beyond tolerance, want only the tampered one", sh.Beyond)
				}
				if sh.Diverged != "" {
					t.Errorf("diverged: %s", sh.Diverged)
				}
				t.Logf("named: %s", f)
			})
		}
	}
}
