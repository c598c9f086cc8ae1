package cpu

// Fused kernels of the training step: the SwiGLU gate (forward and
// backward in one pass each), the sum of squares behind global-norm
// clipping, and the AdamW update.
//
// SwiGLU reproduces the unfused composition a.SiLU().Mul(b) bit for bit:
// each block of silu(a) is computed by the same slice kernels as the
// elementwise SiLU (exp.go) into a small stack buffer, rounded to the
// dtype, and multiplied by b; the backward forms g·b rounded and hands it to
// the SiLU gradient kernel, and recomputes silu(a) for db = g·silu(a)
// instead of reading a saved copy. One pass over memory instead of three
// (forward) or four (backward), and no intermediate tensors.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// fusedBlock is the length of the stack buffers the fused kernels stage a
// block of intermediate values in.
const fusedBlock = 256

// checkSame panics unless every view is contiguous, of one dtype and of
// the first one's element count.
func checkSame(kernel string, views ...backend.View) backend.DType {
	dt := views[0].DType()
	n := views[0].Numel()
	for _, v := range views {
		if v.DType() != dt {
			panic(mismatch(kernel, dt, v.DType()))
		}
		if v.Numel() != n {
			panic(fmt.Sprintf("cpu: %s: element counts differ: %v and %v", kernel, views[0].Shape, v.Shape))
		}
		if !v.IsContiguous() {
			panic(fmt.Sprintf("cpu: %s: view %v with strides %v is not contiguous", kernel, v.Shape, v.Strides))
		}
	}
	if dt != backend.Float32 && dt != backend.Float64 {
		panic(badDType(kernel, dt))
	}
	return dt
}

var _ = declare(backend.KernelSwiGLU, computed)

// SwiGLU writes y = silu(a)·b.
func (be *Backend) SwiGLU(y, a, b backend.View) {
	if checkSame("swiglu", y, a, b) == backend.Float32 {
		swiglu[float32](be, y, a, b)
	} else {
		swiglu[float64](be, y, a, b)
	}
}

func swiglu[T Float](be *Backend, yv, av, bv backend.View) {
	n := yv.Numel()
	y, a, b := floats[T](yv)[:n], floats[T](av)[:n], floats[T](bv)[:n]
	be.parallelFor(n, 3+transCost, func(lo, hi int) {
		if isF32[T]() && swiglu32Fused(asF32(y[lo:hi]), asF32(a[lo:hi]), asF32(b[lo:hi])) {
			return
		}
		var buf [fusedBlock]T
		for j := lo; j < hi; j += fusedBlock {
			e := min(j+fusedBlock, hi)
			s := buf[:e-j]
			unaryKernel(backend.SiLU, backend.Scalars{}, s, a[j:e])
			ys, bs := y[j:e], b[j:e]
			for i, v := range s {
				ys[i] = v * bs[i]
			}
		}
	})
}

// SwiGLUBackward writes da = g·b·silu'(a) and db = g·silu(a).
func (be *Backend) SwiGLUBackward(da, db, a, b, g backend.View) {
	if checkSame("swiglu_backward", da, db, a, b, g) == backend.Float32 {
		swigluBackward[float32](be, da, db, a, b, g)
	} else {
		swigluBackward[float64](be, da, db, a, b, g)
	}
}

func swigluBackward[T Float](be *Backend, dav, dbv, av, bv, gv backend.View) {
	n := dav.Numel()
	da, db := floats[T](dav)[:n], floats[T](dbv)[:n]
	a, b, g := floats[T](av)[:n], floats[T](bv)[:n], floats[T](gv)[:n]
	be.parallelFor(n, 5+2*transCost, func(lo, hi int) {
		if isF32[T]() && swigluBackward32Fused(asF32(da[lo:hi]), asF32(db[lo:hi]),
			asF32(a[lo:hi]), asF32(b[lo:hi]), asF32(g[lo:hi])) {
			return
		}
		var sb, gb [fusedBlock]T
		for j := lo; j < hi; j += fusedBlock {
			e := min(j+fusedBlock, hi)
			s, gbs := sb[:e-j], gb[:e-j]
			as, bs, gs := a[j:e], b[j:e], g[j:e]
			unaryKernel(backend.SiLU, backend.Scalars{}, s, as)
			dbs := db[j:e]
			for i, v := range gs {
				gbs[i] = v * bs[i]
				dbs[i] = v * s[i]
			}
			// The SiLU gradient rule reads x and g only (y is s, unused).
			unaryGradKernel(backend.SiLU, backend.Scalars{}, da[j:e], as, s, gbs)
		}
	})
}

// sumSqBlock is the number of elements summed into one partial sum. The
// blocks, not the workers, fix the order of the additions, so the result
// does not depend on how many workers run.
const sumSqBlock = 1 << 14

// SumSquares writes Σ src² into the one-element view dst.
func (be *Backend) SumSquares(dst, src backend.View) {
	if dst.Numel() != 1 {
		panic(fmt.Sprintf("cpu: sum_squares: dst %v must hold one element", dst.Shape))
	}
	dt := checkSame("sum_squares", src)
	if dst.DType() != dt {
		panic(fmt.Sprintf("cpu: sum_squares: dst is %v, src %v", dst.DType(), dt))
	}
	var s float64
	if dt == backend.Float32 {
		s = sumSquares(be, floats[float32](src)[:src.Numel()])
		f32(dst)[0] = float32(s)
	} else {
		s = sumSquares(be, floats[float64](src)[:src.Numel()])
		f64(dst)[0] = s
	}
}

// sumSquares returns Σ x² accumulated in float64: per block of sumSqBlock
// elements in four interleaved partial sums, then the blocks in order.
func sumSquares[T Float](be *Backend, x []T) float64 {
	nb := (len(x) + sumSqBlock - 1) / sumSqBlock
	var one [1]float64
	parts := one[:]
	if nb > 1 {
		parts = make([]float64, nb)
	}
	be.parallelFor(nb, sumSqBlock, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			parts[k] = sumSquaresBlock(x[k*sumSqBlock : min((k+1)*sumSqBlock, len(x))])
		}
	})
	var s float64
	for _, p := range parts[:nb] {
		s += p
	}
	return s
}

func sumSquaresBlock[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v0, v1, v2, v3 := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0 += v0 * v0
		s1 += v1 * v1
		s2 += v2 * v2
		s3 += v3 * v3
	}
	for ; i < len(x); i++ {
		v := float64(x[i])
		s0 += v * v
	}
	return (s0 + s1) + (s2 + s3)
}

// AdamW applies one AdamW update to param, m and v in place.
func (be *Backend) AdamW(param, grad, m, v backend.View, p backend.AdamWParams) {
	if p.Step < 1 {
		panic(fmt.Sprintf("cpu: adamw: step %d must be ≥ 1", p.Step))
	}
	if checkSame("adamw", param, grad, m, v) == backend.Float32 {
		adamw[float32](be, param, grad, m, v, p)
	} else {
		adamw[float64](be, param, grad, m, v, p)
	}
}

// adamwCoefs are the per-call constants of the update.
type adamwCoefs struct {
	b1, c1, b2, c2 float64 // β1, 1−β1, β2, 1−β2
	invBC2Sqrt     float64 // 1/√(1−β2ᵗ)
	eps            float64
	decay          float64 // 1 − lr·wd
	stepSize       float64 // lr/(1−β1ᵗ)
}

func newAdamWCoefs(p backend.AdamWParams) adamwCoefs {
	t := float64(p.Step)
	return adamwCoefs{
		b1: p.Beta1, c1: 1 - p.Beta1, b2: p.Beta2, c2: 1 - p.Beta2,
		invBC2Sqrt: 1 / math.Sqrt(1-math.Pow(p.Beta2, t)),
		eps:        p.Eps,
		decay:      1 - p.LR*p.WeightDecay,
		stepSize:   p.LR / (1 - math.Pow(p.Beta1, t)),
	}
}

func adamw[T Float](be *Backend, pv, gv, mv, vv backend.View, p backend.AdamWParams) {
	n := pv.Numel()
	w, g := floats[T](pv)[:n], floats[T](gv)[:n]
	m, v := floats[T](mv)[:n], floats[T](vv)[:n]
	c := newAdamWCoefs(p)
	be.parallelFor(n, 24, func(lo, hi int) {
		adamwSlice(c, w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi])
	})
}

// adamwSlice is the update of one slice, every element in float64: m and v
// are rounded once when stored, and the step reads the stored values.
func adamwSlice[T Float](c adamwCoefs, w, g, m, v []T) {
	if isF32[T]() && adamwSlice32(c, asF32(w), asF32(g), asF32(m), asF32(v)) {
		return
	}
	adamwSliceGo(c, w, g, m, v)
}

// adamwSliceGo is the portable adamwSlice (the definition the assembly
// follows).
func adamwSliceGo[T Float](c adamwCoefs, w, g, m, v []T) {
	n := len(w)
	g, m, v = g[:n], m[:n], v[:n]
	for i := range w {
		gi := float64(g[i])
		mi := T(c.b1*float64(m[i]) + c.c1*gi)
		vi := T(c.b2*float64(v[i]) + c.c2*gi*gi)
		m[i], v[i] = mi, vi
		denom := math.Sqrt(float64(vi))*c.invBC2Sqrt + c.eps
		w[i] = T(float64(w[i])*c.decay - c.stepSize*float64(mi)/denom)
	}
}
