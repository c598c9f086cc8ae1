// Package doctor is `forge doctor`: a machine checks itself and writes one
// report a user can attach to a bug report. The front ends (forge doctor,
// the REPL's :doctor, notebook.Doctor) call Run; the checks live here.
//
// Run goes through five sections on the device under test (the default
// device unless Options.Device says otherwise):
//
//  1. machine: OS, CPU, the device and its GPU family (Metal), the BLAS
//     library and kernel core the CPU reference runs;
//  2. kernels: every kernel source file compiled, with the compile time
//     (the GPU compiles file by file; the emulator compiles all files with
//     clang when it opens; the CPU has nothing to compile);
//  3. conformance: forgetest.Quick — the first PyTorch parity case and the
//     first gradient check of every op family, on the device against the
//     CPU;
//  4. shadow parity: one training step of a small GPT on the device and
//     on the CPU from the same weights and batch, compared kernel by
//     kernel (shadow.go), naming the first kernel beyond its tolerance;
//  5. timings beside the seed project's published Apple-GPU figures
//     (timing.go), at sizes scaled down off the GPU, the scale stated.
//
// A failed check is reported, not returned: Run returns an error only when
// it cannot write the report. Nothing here has run on Apple hardware; on
// Linux it runs on the CPU and on the metal-emu emulator.
package doctor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	_ "github.com/forgeml/forge/forge/backends" // the cpu reference and the Metal devices
)

// Options control Run. The zero value checks the default device with
// full-length timings and writes the report into the current directory.
type Options struct {
	Device *forge.Device // the device under test (nil: forge.DefaultDevice())
	Dir    string        // directory of the report file ("": the current directory)
	// Progress receives one line per step while Run works (nil: none).
	Progress io.Writer
	// Short shrinks the timings to a fraction of a second each (tests).
	Short bool
	// SkipTimings leaves the timing section out.
	SkipTimings bool
	// Tamper, if set, is called on the device under test after each
	// kernel of the shadow-parity step, before its outputs are recorded:
	// a test plants a wrong result with it (writing an output in place)
	// and checks that shadow parity names that kernel.
	Tamper func(c forge.KernelCall, out []*forge.Tensor)
}

// Report is the outcome of Run.
type Report struct {
	Path     string   // the report file
	Text     string   // its contents
	Failures []string // one line per failed check (empty: all passed)
	Shadow   *Shadow  // the shadow-parity comparison (nil if it could not run)
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// Summary is the last lines a front end prints: the verdict and the path.
func (r *Report) Summary() string {
	verdict := "all checks passed"
	if !r.OK() {
		verdict = fmt.Sprintf("%d check(s) failed:\n  %s", len(r.Failures), strings.Join(r.Failures, "\n  "))
	}
	return fmt.Sprintf("forge doctor: %s\nreport written to %s (attach it to a bug report)", verdict, r.Path)
}

// run is the state of one Run: the report being written and the progress
// writer.
type run struct {
	opts     Options
	dev, cpu *forge.Device
	b        strings.Builder
	failures []string
}

// progress prints a progress line (to Options.Progress).
func (r *run) progress(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "doctor: "+format+"\n", args...)
	}
}

// section starts a report section.
func (r *run) section(title string) {
	fmt.Fprintf(&r.b, "\n## %s\n\n", title)
}

// line adds a line to the report.
func (r *run) line(format string, args ...any) {
	fmt.Fprintf(&r.b, format+"\n", args...)
}

// fail records a failed check (in the report and the summary).
func (r *run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.failures = append(r.failures, msg)
	r.line("FAIL %s", msg)
}

// Run checks the device and writes the report (see the package doc).
func Run(opts Options) (*Report, error) {
	r := &run{opts: opts}
	if err := forge.Try(func() {
		r.dev = opts.Device
		if r.dev == nil {
			r.dev = forge.DefaultDevice()
		}
	}); err != nil {
		return nil, fmt.Errorf("doctor: no device to check: %w", err)
	}
	cpu, err := forge.OpenDevice("cpu")
	if err != nil {
		return nil, fmt.Errorf("doctor: the cpu device, the reference of every check, does not open: %w", err)
	}
	r.cpu = cpu
	start := time.Now()
	fmt.Fprintf(&r.b, "# forge doctor\n\n%s, device %s\n", start.UTC().Format("2006-01-02 15:04:05 UTC"), r.dev.Name())

	rep := &Report{}
	r.machine()
	r.kernels()
	r.conformance()
	rep.Shadow = r.shadow()
	if !opts.SkipTimings {
		r.timings()
	}
	r.section("Verdict")
	if len(r.failures) == 0 {
		r.line("all checks passed (%.1f s)", time.Since(start).Seconds())
	} else {
		r.line("%d check(s) failed (%.1f s):", len(r.failures), time.Since(start).Seconds())
		for _, f := range r.failures {
			r.line("  - %s", f)
		}
	}

	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	name := fmt.Sprintf("forge-doctor-%s-%s.md", r.dev.Name(), start.UTC().Format("20060102-150405"))
	path := filepath.Join(dir, name)
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if err := os.WriteFile(path, []byte(r.b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("doctor: writing the report: %w (choose another directory)", err)
	}
	rep.Path, rep.Text, rep.Failures = path, r.b.String(), r.failures
	return rep, nil
}
