package forgetest

import (
	"fmt"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
)

// noFloat64 is the CPU backend refusing float64 buffers, as Metal does: it
// runs GradCheck's float32 path (float32 analytic gradients against
// float64 differences on the cpu device).
type noFloat64 struct{ *cpu.Backend }

func (noFloat64) Name() string { return "forgetest-nofloat64" }

func (n noFloat64) Alloc(dt backend.DType, size int) backend.Buffer {
	if dt == backend.Float64 {
		panic("forgetest-nofloat64: no float64")
	}
	return n.Backend.Alloc(dt, size)
}

// pendingSoftmax is the CPU backend without Softmax and LayerNorm, of
// which it declares only Softmax missing.
type pendingSoftmax struct{ *cpu.Backend }

func (pendingSoftmax) Name() string             { return "forgetest-pending" }
func (pendingSoftmax) PendingKernels() []string { return []string{"Softmax"} }

func (pendingSoftmax) Softmax(y, x backend.View, log bool) {
	panic(backend.ErrNotImplemented{Backend: "forgetest-pending", Kernel: "Softmax"})
}

func (pendingSoftmax) LayerNorm(y, mean, rstd, x, w, b backend.View, eps float64) {
	panic(backend.ErrNotImplemented{Backend: "forgetest-pending", Kernel: "LayerNorm"})
}

func init() {
	backend.Register("forgetest-nofloat64", func() (backend.Backend, error) { return noFloat64{cpu.New()}, nil })
	backend.Register("forgetest-pending", func() (backend.Backend, error) { return pendingSoftmax{cpu.New()}, nil })
}

// TestGradCheckFloat32 runs GradCheck's path for devices without float64.
func TestGradCheckFloat32(t *testing.T) {
	dev, err := forge.OpenDevice("forgetest-nofloat64")
	if err != nil {
		t.Fatal(err)
	}
	if propHasFloat64(dev) {
		t.Fatal("the no-float64 device holds float64 tensors")
	}
	GradCheck(t, dev)
}

// TestPendingKernels checks the classification: a declared missing kernel
// is excused and counted, an undeclared one and other panics are not.
func TestPendingKernels(t *testing.T) {
	dev, err := forge.OpenDevice("forgetest-pending")
	if err != nil {
		t.Fatal(err)
	}
	pl := newPendingLog(dev)
	x := forge.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3).To(dev)
	err = forge.Try(func() { x.Softmax(-1) })
	if k, ok := pl.declaredMissing(err); !ok || k != "Softmax" {
		t.Errorf("Softmax: declaredMissing(%v) = %q, %v; want Softmax, true", err, k, ok)
	}
	err = forge.Try(func() { forge.LayerNorm(x, nil, nil, 1e-5) })
	if k, ok := pl.declaredMissing(err); ok {
		t.Errorf("LayerNorm (not declared): declaredMissing = %q, true; want false", k)
	}
	if _, ok := notImplemented(err); !ok {
		t.Errorf("LayerNorm: %v does not carry ErrNotImplemented", err)
	}
	if _, ok := pl.declaredMissing("some other panic"); ok {
		t.Error("a plain panic was excused")
	}
	// The same kernel declared by another backend is not excused.
	if _, ok := pl.declaredMissing(backend.ErrNotImplemented{Backend: "other", Kernel: "Softmax"}); ok {
		t.Error("another backend's missing Softmax was excused")
	}
	if pl.checks != 1 || pl.counts["Softmax"] != 1 {
		t.Errorf("counted %d checks (%v), want 1 (Softmax ×1)", pl.checks, pl.counts)
	}
	cpuDev, err := forge.OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(newPendingLog(cpuDev).declared); n != 0 {
		t.Errorf("cpu declares %d missing kernels, want none", n)
	}
}

// badTanhGrad is noFloat64 with a tanh gradient 1% off.
type badTanhGrad struct{ noFloat64 }

func (badTanhGrad) Name() string { return "forgetest-badtanhgrad" }

func (b badTanhGrad) UnaryGrad(op backend.UnaryOp, s backend.Scalars, dx, x, y, g backend.View) {
	b.noFloat64.UnaryGrad(op, s, dx, x, y, g)
	if op == backend.Tanh {
		b.noFloat64.Unary(backend.Affine, backend.Scalars{A: 1.01}, dx, dx)
	}
}

func init() {
	backend.Register("forgetest-badtanhgrad", func() (backend.Backend, error) { return badTanhGrad{noFloat64{cpu.New()}}, nil })
}

// recordTB records failures instead of failing the test.
type recordTB struct {
	testing.TB
	errors []string
}

func (r *recordTB) Helper()                         {}
func (r *recordTB) Logf(format string, args ...any) {}
func (r *recordTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(r)
}

// TestGradCheckFloat32CanFail checks that the float32 path catches a
// gradient rule 1% off.
func TestGradCheckFloat32CanFail(t *testing.T) {
	dev, err := forge.OpenDevice("forgetest-badtanhgrad")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := forge.OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	cases, refCases := gradCases(dev), gradCases(ref)
	for i, c := range cases {
		if c.name != "unary/tanh" && c.name != "unary/exp" {
			continue
		}
		rec := &recordTB{TB: t}
		checkCase32(rec, dev, ref, c, refCases[i])
		if bad := len(rec.errors) > 0; bad != (c.name == "unary/tanh") {
			t.Errorf("%s: failures %q; want failures only for unary/tanh", c.name, rec.errors)
		}
	}
}
