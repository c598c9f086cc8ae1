package forgetest

// Conformance of the fused training-step kernels: SwiGLU (against the
// unfused composition and a float64 host formula), SumSquares (against a
// float64 host sum), AdamW (against a float64 host implementation of
// torch.optim.AdamW's update, over several steps), the in-place scale and
// the deferred clip's factors.

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// Fused runs the fused-kernel checks on dev (float32, and float64 where
// the device holds it).
func Fused(t *testing.T, dev *forge.Device) {
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	dts := []forge.DType{forge.Float32}
	if propHasFloat64(dev) {
		dts = append(dts, forge.Float64)
	}
	run := func(name string, check func(*testing.T, *forge.Device, forge.DType), dt forge.DType) {
		t.Run(name+"_"+dt.String(), func(t *testing.T) { check(t, dev, dt) })
	}
	for _, dt := range dts {
		run("swiglu", fusedSwiGLU, dt)
		run("sum_squares", fusedSumSquares, dt)
		run("adamw", fusedAdamW, dt)
		run("mul_scalar_in_place", fusedScale, dt)
		run("grad_clip_factors", fusedClipFactors, dt)
	}
}

// fusedClipFactors checks GradClip.Factors, what a composed optimizer
// (Muon) reads of a deferred clip on the device: the coefficient
// min(1, maxNorm/(norm + 1e-6)) against the host formula on a float64 sum,
// 1 without clipping, and the skip flag of a non-finite norm.
func fusedClipFactors(t *testing.T, dev *forge.Device, dt forge.DType) {
	v := fusedValues(300, 41, 2, dt)
	sum := 0.0
	for _, x := range v {
		sum += x * x
	}
	norm := math.Sqrt(sum)
	g := fusedTensor(dev, dt, v, 3, 100)
	for _, c := range []struct {
		maxNorm, coef float64
	}{{1, 1 / (norm + 1e-6)}, {2 * norm, 1}} {
		coef, skip := forge.NewGradClip([]*forge.Tensor{g}, c.maxNorm).Factors(dev, dt)
		got, s := coef.Float64s(), skip.Float64s()
		if len(got) != 1 || math.Abs(got[0]-c.coef) > fusedTol(dt)*c.coef || s[0] != 0 {
			t.Errorf("max norm %v: coefficient %v, skip %v; want %v, 0", c.maxNorm, got, s, c.coef)
		}
	}
	bad := append([]float64(nil), v...)
	bad[7] = math.NaN()
	_, skip := forge.NewGradClip([]*forge.Tensor{fusedTensor(dev, dt, bad, 3, 100)}, 1).Factors(dev, dt)
	if s := skip.Float64s(); s[0] != 1 {
		t.Errorf("a NaN gradient: skip flag %v, want 1", s)
	}
}

// fusedTol is the relative tolerance of a result computed in dt.
func fusedTol(dt forge.DType) float64 {
	if dt == forge.Float32 {
		return 4e-7
	}
	return 1e-14
}

// fusedValues returns n deterministic pseudo-random values in about
// [−scale, scale], rounded to dt.
func fusedValues(n int, seed uint64, scale float64, dt forge.DType) []float64 {
	v := make([]float64, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		f := (float64(x>>11)/(1<<53)*2 - 1) * scale
		if dt == forge.Float32 {
			f = float64(float32(f))
		}
		v[i] = f
	}
	return v
}

func fusedTensor(dev *forge.Device, dt forge.DType, v []float64, shape ...int) *forge.Tensor {
	if dt == forge.Float32 { // built as float32 on the host: dev may hold no float64
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return forge.FromSlice(f, shape...).To(dev)
	}
	return forge.FromSlice(v, shape...).Cast(dt).To(dev)
}

func fusedExpect(t *testing.T, what string, got, want []float64, rel, abs float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > rel*math.Abs(want[i])+abs || math.IsNaN(got[i]) != math.IsNaN(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func fusedSwiGLU(t *testing.T, dev *forge.Device, dt forge.DType) {
	const rows, cols = 37, 300 // not a multiple of any vector width
	n := rows * cols
	av, bv, gv := fusedValues(n, 1, 6, dt), fusedValues(n, 2, 2, dt), fusedValues(n, 3, 1, dt)
	a := fusedTensor(dev, dt, av, rows, cols).RequiresGrad()
	b := fusedTensor(dev, dt, bv, rows, cols).RequiresGrad()
	g := fusedTensor(dev, dt, gv, rows, cols)
	y := forge.SwiGLU(a, b)
	y.Backward(g)
	ya, da, db := y.Float64s(), a.Grad().Float64s(), b.Grad().Float64s()

	// The unfused composition.
	a2 := fusedTensor(dev, dt, av, rows, cols).RequiresGrad()
	b2 := fusedTensor(dev, dt, bv, rows, cols).RequiresGrad()
	y2 := a2.SiLU().Mul(b2)
	y2.Backward(g)
	tol := 2 * fusedTol(dt)
	fusedExpect(t, "y vs a.SiLU().Mul(b)", ya, y2.Float64s(), tol, 1e-37)
	fusedExpect(t, "da vs composition", da, a2.Grad().Float64s(), tol, 1e-37)
	fusedExpect(t, "db vs composition", db, b2.Grad().Float64s(), tol, 1e-37)

	// The float64 formulas on the host.
	// silu'(x) = s·(1 + x·(1−s)) cancels near x ≈ −1.28, where it is 0:
	// da is held to the tolerance relative to the size of the terms that
	// cancel (|g·b·s|·(1 + |x·(1−s)|)), the error any evaluation in the
	// dtype makes there; elsewhere that is |da| itself.
	wy, wa, wb := make([]float64, n), make([]float64, n), make([]float64, n)
	sa := make([]float64, n)
	for i := range av {
		x := av[i]
		s := 1 / (1 + math.Exp(-x))
		wy[i] = x * s * bv[i]
		wa[i] = gv[i] * bv[i] * s * (1 + x*(1-s))
		sa[i] = math.Abs(gv[i]*bv[i]*s) * (1 + math.Abs(x*(1-s)))
		wb[i] = gv[i] * x * s
	}
	tol = 4 * fusedTol(dt)
	fusedExpect(t, "y", ya, wy, tol, 1e-37)
	fusedExpectScaled(t, "da", da, wa, sa, tol)
	fusedExpect(t, "db", db, wb, tol, 1e-37)
}

// fusedExpectScaled checks |got − want| ≤ rel·scale element by element:
// scale is the magnitude of the terms the exact value is computed from.
func fusedExpectScaled(t *testing.T, what string, got, want, scale []float64, rel float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > rel*scale[i]+1e-37 || math.IsNaN(got[i]) != math.IsNaN(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v (terms of size %.3g)", what, i, got[i], want[i], scale[i])
		}
	}
}

func fusedSumSquares(t *testing.T, dev *forge.Device, dt forge.DType) {
	sizes := []int{1, 5, 1000, 70001}
	var ts []*forge.Tensor
	var want []float64
	for i, n := range sizes {
		v := fusedValues(n, uint64(10+i), 0.3, dt)
		var s float64
		for _, x := range v {
			s += x * x
		}
		want = append(want, s)
		ts = append(ts, fusedTensor(dev, dt, v, n))
	}
	// A strided view: the transpose of a (4, 6) matrix.
	m := fusedValues(24, 99, 1, dt)
	var s float64
	for _, x := range m {
		s += x * x
	}
	ts = append(ts, fusedTensor(dev, dt, m, 4, 6).T())
	want = append(want, s)
	got := forge.SumSquaresOf(ts)
	fusedExpect(t, "SumSquaresOf", got, want, 2*fusedTol(dt), 0)
	for i, x := range ts {
		fusedExpect(t, "SumSquares", []float64{x.SumSquares().Item()}, want[i:i+1], 2*fusedTol(dt), 0)
	}
}

func fusedAdamW(t *testing.T, dev *forge.Device, dt forge.DType) {
	const n = 41 * 122
	w0 := fusedValues(n, 20, 0.5, dt)
	for _, wd := range []float64{0, 0.1} {
		w := fusedTensor(dev, dt, w0, 41, 122)
		m := forge.ZerosOf(dt, 41, 122).To(dev)
		v := forge.ZerosOf(dt, 41, 122).To(dev)
		rw, rm, rv := append([]float64(nil), w0...), make([]float64, n), make([]float64, n)
		round := func(x float64) float64 {
			if dt == forge.Float32 {
				return float64(float32(x))
			}
			return x
		}
		// Without the kernel, forge composes the update from elementwise
		// ops that each round (three for a moment, seven for the weight),
		// and a moment's two terms may cancel: its error is bounded by
		// the terms, not by the result. The reference adds its own: one
		// rounding to float32, or in float64 as many as the device's.
		composed := !dev.Supports(backend.KernelAdamW, dt)
		u, km, kw := 0x1p-24, 4.0, 8.0
		if dt == forge.Float64 {
			u, km, kw = 0x1p-53, 6, 14
		}
		for step := 1; step <= 3; step++ {
			gs := fusedValues(n, uint64(30+step), 0.01, dt)
			pw, pm, pv := append([]float64(nil), rw...), append([]float64(nil), rm...), append([]float64(nil), rv...)
			p := forge.AdamWParams{LR: 0.01 * float64(step), Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: wd, Step: step}
			forge.NoGrad(func() { forge.AdamWUpdate(w, fusedTensor(dev, dt, gs, 41, 122), m, v, p) })
			bc1 := 1 - math.Pow(p.Beta1, float64(step))
			bc2 := 1 - math.Pow(p.Beta2, float64(step))
			for i := range rw {
				g := gs[i]
				rm[i] = round(p.Beta1*rm[i] + (1-p.Beta1)*g)
				rv[i] = round(p.Beta2*rv[i] + (1-p.Beta2)*g*g)
				rw[i] = round(rw[i]*(1-p.LR*wd) - p.LR*(rm[i]/bc1)/(math.Sqrt(rv[i]/bc2)+p.Eps))
			}
			// Each step compares, then continues from the device's values,
			// so rounding differences do not compound.
			gw, gm, gv := w.Float64s(), m.Float64s(), v.Float64s()
			if composed {
				for i := range rw {
					g := gs[i]
					tm := math.Abs(p.Beta1*pm[i]) + math.Abs((1-p.Beta1)*g)
					tv := p.Beta2*pv[i] + (1-p.Beta2)*g*g
					// The weight from the device's moments, so that their
					// errors are not counted twice.
					upd := p.LR * (gm[i] / bc1) / (math.Sqrt(gv[i]/bc2) + p.Eps)
					ww := pw[i]*(1-p.LR*wd) - upd
					tw := math.Abs(pw[i]*(1-p.LR*wd)) + math.Abs(upd)
					switch {
					case math.Abs(gm[i]-rm[i]) > km*u*tm:
						t.Fatalf("step %d: m[%d] = %v, want %v within %gu·%g", step, i, gm[i], rm[i], km, tm)
					case math.Abs(gv[i]-rv[i]) > km*u*tv:
						t.Fatalf("step %d: v[%d] = %v, want %v within %gu·%g", step, i, gv[i], rv[i], km, tv)
					case math.Abs(gw[i]-ww) > kw*u*tw:
						t.Fatalf("step %d: w[%d] = %v, want %v within %gu·%g", step, i, gw[i], ww, kw, tw)
					}
				}
				copy(rw, gw)
				copy(rm, gm)
				copy(rv, gv)
				continue
			}
			fusedExpect(t, "m", gm, rm, 2*fusedTol(dt), 0)
			fusedExpect(t, "v", gv, rv, 2*fusedTol(dt), 0)
			// The update is a difference of terms up to ~1: its error is
			// absolute.
			abs := 1e-15
			if dt == forge.Float32 {
				abs = 1e-8
			}
			fusedExpect(t, "w", gw, rw, 2*fusedTol(dt), abs)
			copy(rw, gw)
			copy(rm, gm)
			copy(rv, gv)
		}
	}
	// Misuse: a non-contiguous parameter, mismatched shapes, step 0, and a
	// write while recording.
	w := fusedTensor(dev, dt, w0[:12], 3, 4)
	z := forge.ZerosOf(dt, 3, 4).To(dev)
	bad := map[string]func(){
		"non-contiguous": func() {
			zt := forge.ZerosOf(dt, 4, 3).To(dev).T()
			forge.AdamWUpdate(zt, z, z.Clone(), z.Clone(), forge.AdamWParams{LR: 1, Step: 1})
		},
		"shapes": func() {
			forge.AdamWUpdate(w, forge.ZerosOf(dt, 12).To(dev), z.Clone(), z.Clone(), forge.AdamWParams{LR: 1, Step: 1})
		},
		"step 0": func() { forge.AdamWUpdate(w, z, z.Clone(), z.Clone(), forge.AdamWParams{LR: 1}) },
		"recording": func() {
			p := w.Clone().RequiresGrad()
			forge.AdamWUpdate(p, z, z.Clone(), z.Clone(), forge.AdamWParams{LR: 1, Step: 1})
		},
	}
	for name, f := range bad {
		err := forge.Try(f)
		if err == nil {
			t.Errorf("AdamWUpdate with %s: no error", name)
		} else if e, ok := err.(*forge.Error); !ok || e.Op != "adamw" {
			t.Errorf("AdamWUpdate with %s: %v (%T), want a *forge.Error of op adamw", name, err, err)
		}
	}
}

func fusedScale(t *testing.T, dev *forge.Device, dt forge.DType) {
	v := fusedValues(6000, 7, 3, dt)
	x := fusedTensor(dev, dt, v, 60, 100)
	view := x.Narrow(0, 10, 5) // shares x's memory
	x.MulScalarInPlace(-0.75)
	want := make([]float64, len(v))
	for i := range v {
		want[i] = -0.75 * v[i]
		if dt == forge.Float32 {
			want[i] = float64(float32(want[i]))
		}
	}
	fusedExpect(t, "MulScalarInPlace", x.Float64s(), want, 0, 0)
	fusedExpect(t, "view after MulScalarInPlace", view.Float64s(), want[1000:1500], 0, 0)
	// A strided view scales only its own elements.
	y := fusedTensor(dev, dt, v[:12], 3, 4)
	y.T().Narrow(0, 1, 2).MulScalarInPlace(2)
	got := y.Float64s()
	for i := range got {
		w := v[i]
		if c := i % 4; c == 1 || c == 2 {
			w *= 2
		}
		if got[i] != w {
			t.Fatalf("strided MulScalarInPlace: element %d = %v, want %v", i, got[i], w)
		}
	}
	if err := forge.Try(func() { forge.OnesLike(x).Sum().Expand(3).MulScalarInPlace(2) }); err == nil {
		t.Error("MulScalarInPlace on a broadcast view: no error")
	}
}
