package forgetest

// Quick: a few-second subset of the suite that runs outside go test (forge
// doctor runs it on a user's machine). It calls the same per-case checks
// as TorchParity and GradCheck — torchRun and checkCase32, with their
// tolerances — one case per op family, and collects the outcomes instead
// of failing a test.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// Check is the outcome of one conformance case run by Quick.
type Check struct {
	Suite   string  // "torch" (PyTorch parity) or "grad" (gradient check)
	Name    string  // the case, e.g. "matmul/nn" or "unary/exp"
	Fwd     float64 // torch: worst |got−want|/max(1,|want|) of the outputs; -1 for grad
	Grad    float64 // worst normalised gradient difference; -1 when not checked
	Failure string  // empty when the case passed
}

// Quick runs the first PyTorch fixture case of every op family (forward
// values and input gradients, TorchParity's tolerances) and the first
// gradient-check case of every op family (float32 analytic gradients on
// dev against float64 central differences on the cpu device, GradCheck's
// float32 tolerance) on dev. progress, if not nil, is called after each
// case. An error means the suite could not start (no fixtures, no cpu
// device); a failing case is a Check with a Failure.
func Quick(dev *forge.Device, progress func(Check)) ([]Check, error) {
	files, err := torchLoad()
	if err != nil {
		return nil, fmt.Errorf("torch fixtures: %w", err)
	}
	ref, err := forge.OpenDevice("cpu")
	if err != nil {
		return nil, fmt.Errorf("the cpu device for the reference differences does not open: %w", err)
	}
	var prev *forge.Device
	_ = forge.Try(func() { prev = forge.DefaultDevice() })
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)

	var out []Check
	add := func(c Check) {
		out = append(out, c)
		if progress != nil {
			progress(c)
		}
	}
	for _, f := range files {
		if len(f.Cases) == 0 {
			continue
		}
		c := &f.Cases[0]
		r := torchRun(dev, c)
		add(Check{Suite: "torch", Name: c.Name, Fwd: r.fwd, Grad: r.grad, Failure: r.failure})
	}

	cases, refCases := gradCases(dev), gradCases(ref)
	seen := map[string]bool{}
	for i, c := range cases {
		family, _, _ := strings.Cut(c.name, "/")
		if seen[family] {
			continue
		}
		seen[family] = true
		rec := &recorder{}
		var worst float64
		func() {
			defer rec.recoverStop()
			if err := forge.Try(func() { worst = checkCase32(rec, dev, ref, c, refCases[i]) }); err != nil {
				rec.Errorf("%v", err)
			}
		}()
		add(Check{Suite: "grad", Name: c.name, Fwd: -1, Grad: worst, Failure: rec.failure()})
	}
	return out, nil
}

// recorder is the testing.TB the per-case checks report to when they run
// outside go test: it keeps the first errors and turns Fatal into a stop
// of the case (a panic recoverStop catches). Methods of testing.TB the
// checks do not call are left to the nil embedded interface and panic.
type recorder struct {
	testing.TB
	errs []string
}

type recorderStop struct{}

func (r *recorder) Helper()                   {}
func (r *recorder) Log(args ...any)           {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Error(args ...any)         { r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fail()                     { r.Error("failed") }
func (r *recorder) FailNow()                  { r.Fail(); panic(recorderStop{}) }
func (r *recorder) Fatal(args ...any)         { r.Error(args...); panic(recorderStop{}) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); panic(recorderStop{}) }
func (r *recorder) Failed() bool              { return len(r.errs) > 0 }
func (r *recorder) Name() string              { return "forgetest.Quick" }

// recoverStop ends a case stopped by Fatal (deferred); other panics go on.
func (r *recorder) recoverStop() {
	if p := recover(); p != nil {
		if _, ok := p.(recorderStop); !ok {
			panic(p)
		}
	}
}

// failure is the first error and how many more there were ("" if none).
func (r *recorder) failure() string {
	switch len(r.errs) {
	case 0:
		return ""
	case 1:
		return r.errs[0]
	}
	return fmt.Sprintf("%s (and %d more)", r.errs[0], len(r.errs)-1)
}
