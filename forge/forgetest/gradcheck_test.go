package forgetest

import (
	"fmt"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
)

func TestGradCheck(t *testing.T) { GradCheck(t, Device(t)) }

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

func init() {
	backend.Register("forgetest-nofloat64", func() (backend.Backend, error) { return noFloat64{cpu.New()}, nil })
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
