package cpu

// Elementwise kernels: Unary, UnaryGrad, Binary and Where.
//
// Every kernel has the same three layers:
//
//   - the Backend method checks dtypes and picks the instantiation;
//   - a driver coalesces the views (newLayout) and walks the innermost runs in
//     parallel (eachRun), choosing per run between the direct path (every
//     operand contiguous, or a scalar operand with inner stride 0) and the
//     general path, which gathers strided operands into small per-worker
//     buffers of ewChunk elements and scatters the result;
//   - a kernel over contiguous slices switches on the op once and runs one
//     tight loop per op, so the inner loops make no indirect calls.
//
// Float32 math: +, −, ×, ÷ and comparisons run in float32, which is
// correctly rounded. Everything else (exp, log, tanh, erf, pow, the affine
// map, gradients of transcendental functions) is computed in float64 from
// the float32 inputs and rounded once, so float32 results are within about
// one ulp of the exact value. The exp-based ops (exp, tanh, sigmoid, SiLU,
// GELU-tanh and the SiLU and GELU-tanh gradients) run for float32 in the
// fused slice kernels of exp.go (AVX-512 or AVX2 assembly on amd64), which
// compute e^x to ~5e-16 and the formula in float64 and round once, like the
// loops below. Float64 uses the math package throughout.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// ewChunk is the length of the per-worker buffers the general path gathers
// strided operands into.
const ewChunk = 512

// Constants of the GELU rules.
const (
	geluK      = 0.7978845608028654 // √(2/π)
	geluC      = 0.044715           // cubic coefficient of the tanh form
	invSqrt2   = 0.7071067811865476 // 1/√2
	invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
)

// Approximate per-element costs in memory touches, for the parallel
// threshold: the views touched plus the math done.
const (
	unaryCheap = 2  // dst, src
	binaryCost = 3  // dst, a, b
	gradCost   = 4  // dx, x, y, g
	whereCost  = 4  // dst, cond, a, b
	transCost  = 16 // exp, log, tanh
	erfCost    = 32 // erfc plus exp
	powCost    = 24 // math.Pow
)

// wholeFloats returns the entire buffer of v as []T, ignoring v.Offset (layouts
// carry the offsets).
func wholeFloats[T Float](v backend.View) []T {
	return floats[T](backend.View{Buf: v.Buf})
}

// forRuns calls fn for every innermost run overlapping the flat element
// range [lo, hi) of the layout, in row-major order. Runs at the ends of the
// range are cut, so a single long run can be shared between workers. offs[v]
// is the offset of view v's first element of the (possibly cut) run; offs is
// reused between calls.
func (l layout) forRuns(lo, hi int, fn func(offs []int, n int)) {
	if lo >= hi {
		return
	}
	inner := l.inner()
	last := len(l.shape) - 1
	r0, r1 := lo/inner, (hi-1)/inner+1
	cur := make([]int, len(l.offsets))
	r := r0
	l.forRows(r0, r1, func(offs []int) {
		a, e := 0, inner
		if r == r0 {
			a = lo - r0*inner
		}
		if r == r1-1 {
			e = hi - r*inner
		}
		for v := range cur {
			cur[v] = offs[v] + a*l.strides[v][last]
		}
		fn(cur, e-a)
		r++
	})
}

// eachRun runs the layout's innermost runs in parallel, splitting long runs
// too so that a contiguous array (one run) still uses every worker. weight is
// the approximate cost of one element in memory touches. worker is called
// once per goroutine to build the run function, so each goroutine can own
// its scratch buffers.
func (b *Backend) eachRun(l layout, weight int, worker func() func(offs []int, n int)) {
	b.parallelFor(l.rows()*l.inner(), weight, func(lo, hi int) {
		l.forRuns(lo, hi, worker())
	})
}

// ewGather copies n elements x[p], x[p+s], … into t[:n].
func ewGather[T Float](t, x []T, p, s int) []T {
	for i := range t {
		t[i] = x[p]
		p += s
	}
	return t
}

// ewScatter copies t into d[p], d[p+s], ….
func ewScatter[T Float](d []T, p, s int, t []T) {
	for _, v := range t {
		d[p] = v
		p += s
	}
}

// ewFill sets n elements d[p], d[p+s], … to v.
func ewFill[T Float](d []T, p, n, s int, v T) {
	if s == 1 {
		d = d[p : p+n]
		for i := range d {
			d[i] = v
		}
		return
	}
	for ; n > 0; n-- {
		d[p] = v
		p += s
	}
}

// ewOperand returns the m elements of a strided operand starting at p as a
// contiguous slice: the buffer itself when s == 1, else a gather into t.
func ewOperand[T Float](x []T, p, m, s int, t []T) []T {
	if s == 1 {
		return x[p : p+m]
	}
	return ewGather(t[:m], x, p, s)
}

func ewCheckFloat(kernel string, views ...backend.View) backend.DType {
	dt := views[0].DType()
	if dt != backend.Float32 && dt != backend.Float64 {
		panic(badDType(kernel, dt))
	}
	for _, v := range views[1:] {
		if v.DType() != dt {
			panic(fmt.Sprintf("cpu: %s: mixed dtypes %v and %v", kernel, dt, v.DType()))
		}
	}
	return dt
}

// ---------------------------------------------------------------------------
// Unary

// Unary computes dst = op(src); src is broadcast to dst's shape.
func (b *Backend) Unary(op backend.UnaryOp, s backend.Scalars, dst, src backend.View) {
	if op >= backend.UnaryOp(len(unaryCosts)) {
		panic(fmt.Sprintf("cpu: unary: unknown op %v", op))
	}
	if ewCheckFloat("unary", dst, src) == backend.Float32 {
		unary[float32](b, op, s, dst, src)
	} else {
		unary[float64](b, op, s, dst, src)
	}
}

// unaryCosts is the per-element cost of each unary op, for the parallel
// threshold.
var unaryCosts = [...]int{
	backend.Neg: unaryCheap, backend.Exp: transCost, backend.Log: transCost,
	backend.Sqrt: unaryCheap + 2, backend.Rsqrt: unaryCheap + 4, backend.Tanh: transCost,
	backend.Sigmoid: transCost, backend.SiLU: transCost, backend.GELUTanh: transCost,
	backend.GELUErf: erfCost, backend.ReLU: unaryCheap, backend.Abs: unaryCheap,
	backend.PowScalar: powCost, backend.Clamp: unaryCheap, backend.Affine: unaryCheap,
	backend.RPowScalar: powCost, backend.RDivScalar: unaryCheap + 4,
	backend.Square: unaryCheap, backend.Sign: unaryCheap, backend.Round: unaryCheap,
}

func unary[T Float](b *Backend, op backend.UnaryOp, s backend.Scalars, dst, src backend.View) {
	l := newLayout(dst, src)
	d, x := wholeFloats[T](dst), wholeFloats[T](src)
	sd, sx := l.innerStride(0), l.innerStride(1)
	b.eachRun(l, unaryCosts[op], func() func([]int, int) {
		var td, tx []T
		return func(o []int, n int) {
			pd, px := o[0], o[1]
			switch {
			case sx == 0: // one value broadcast along the run
				var one [1]T
				unaryKernel(op, s, one[:], x[px:px+1])
				ewFill(d, pd, n, sd, one[0])
			case sd == 1 && sx == 1:
				unaryKernel(op, s, d[pd:pd+n], x[px:px+n])
			default:
				if td == nil {
					td, tx = make([]T, ewChunk), make([]T, ewChunk)
				}
				for j := 0; j < n; j += ewChunk {
					m := min(ewChunk, n-j)
					xs := ewOperand(x, px+j*sx, m, sx, tx)
					ds := td[:m]
					if sd == 1 {
						ds = d[pd+j : pd+j+m]
					}
					unaryKernel(op, s, ds, xs)
					if sd != 1 {
						ewScatter(d, pd+j*sd, sd, ds)
					}
				}
			}
		}
	})
}

// unaryKernel computes d[i] = op(x[i]) for contiguous slices; len(x) ≥ len(d).
func unaryKernel[T Float](op backend.UnaryOp, s backend.Scalars, d, x []T) {
	x = x[:len(d)]
	if isF32[T]() && usesExp32(op) {
		unaryExp32(op, d, x)
		return
	}
	switch op {
	case backend.Neg:
		for i := range d {
			d[i] = -x[i]
		}
	case backend.Exp:
		for i := range d {
			d[i] = T(math.Exp(float64(x[i])))
		}
	case backend.Log:
		for i := range d {
			d[i] = T(math.Log(float64(x[i])))
		}
	case backend.Sqrt:
		for i := range d {
			d[i] = T(math.Sqrt(float64(x[i])))
		}
	case backend.Rsqrt:
		for i := range d {
			d[i] = T(1 / math.Sqrt(float64(x[i])))
		}
	case backend.Tanh:
		for i := range d {
			d[i] = T(math.Tanh(float64(x[i])))
		}
	case backend.Sigmoid:
		for i := range d {
			d[i] = T(1 / (1 + math.Exp(-float64(x[i]))))
		}
	case backend.SiLU:
		for i := range d {
			v := float64(x[i])
			d[i] = T(v / (1 + math.Exp(-v)))
		}
	case backend.GELUTanh:
		// 0.5·x·(1+tanh u) = x·sigmoid(2u): the same function without the
		// cancellation in 1+tanh u for negative x.
		for i := range d {
			v := float64(x[i])
			u := geluK * (v + geluC*v*v*v)
			d[i] = T(v / (1 + math.Exp(-2*u)))
		}
	case backend.GELUErf:
		// 0.5·x·(1+erf(x/√2)) = 0.5·x·erfc(−x/√2), accurate for negative x.
		for i := range d {
			v := float64(x[i])
			d[i] = T(0.5 * v * math.Erfc(-v*invSqrt2))
		}
	case backend.ReLU:
		// NaN and −0 pass through, as in PyTorch.
		for i := range d {
			v := x[i]
			if v < 0 {
				v = 0
			}
			d[i] = v
		}
	case backend.Abs:
		for i := range d {
			d[i] = T(math.Abs(float64(x[i])))
		}
	case backend.PowScalar:
		powScalar(d, x, s.A)
	case backend.Clamp:
		// min(max(x, A), B): NaN propagates; A > B gives B everywhere.
		lo, hi := T(s.A), T(s.B)
		for i := range d {
			v := x[i]
			if v < lo {
				v = lo
			}
			if v > hi {
				v = hi
			}
			d[i] = v
		}
	case backend.Affine:
		a, c := s.A, s.B
		for i := range d {
			d[i] = T(a*float64(x[i]) + c)
		}
	case backend.RPowScalar:
		a := s.A
		for i := range d {
			d[i] = T(math.Pow(a, float64(x[i])))
		}
	case backend.RDivScalar:
		a := s.A
		for i := range d {
			d[i] = T(a / float64(x[i]))
		}
	case backend.Square:
		for i := range d {
			d[i] = x[i] * x[i]
		}
	case backend.Sign:
		// NaN gives 0, as in PyTorch.
		for i := range d {
			v := x[i]
			switch {
			case v > 0:
				d[i] = 1
			case v < 0:
				d[i] = -1
			default:
				d[i] = 0
			}
		}
	case backend.Round:
		// Halves to even, as torch.round and IEEE's roundTiesToEven; −0
		// and values that round to zero from below keep their sign.
		for i := range d {
			d[i] = T(math.RoundToEven(float64(x[i])))
		}
	default:
		panic(fmt.Sprintf("cpu: unary: unknown op %v", op))
	}
}

// powScalar computes d[i] = x[i]^a with exact fast paths for the common
// integer exponents; everything else goes through math.Pow.
func powScalar[T Float](d, x []T, a float64) {
	x = x[:len(d)]
	switch a {
	case 0: // x⁰ = 1, even for NaN
		for i := range d {
			d[i] = 1
		}
	case 1:
		copy(d, x)
	case 2:
		for i := range d {
			d[i] = x[i] * x[i]
		}
	case 3:
		for i := range d {
			v := float64(x[i])
			d[i] = T(v * v * v)
		}
	case -1:
		for i := range d {
			d[i] = T(1 / float64(x[i]))
		}
	default:
		for i := range d {
			d[i] = T(math.Pow(float64(x[i]), a))
		}
	}
}

// ---------------------------------------------------------------------------
// UnaryGrad

// UnaryGrad computes dx = g·op'(x). y = op(x) is used by the rules that are
// cheaper in y; a y with a nil Buf is recomputed from x.
func (b *Backend) UnaryGrad(op backend.UnaryOp, s backend.Scalars, dx, x, y, g backend.View) {
	if op >= backend.UnaryOp(len(unaryCosts)) {
		panic(fmt.Sprintf("cpu: unary_grad: unknown op %v", op))
	}
	views := []backend.View{dx, x, g}
	if y.Buf != nil {
		views = append(views, y)
	}
	if ewCheckFloat("unary_grad", views...) == backend.Float32 {
		unaryGrad[float32](b, op, s, dx, x, y, g)
	} else {
		unaryGrad[float64](b, op, s, dx, x, y, g)
	}
}

func unaryGrad[T Float](b *Backend, op backend.UnaryOp, s backend.Scalars, dxv, xv, yv, gv backend.View) {
	haveY := yv.Buf != nil
	if !haveY {
		yv = xv // placeholder with a valid shape; its values are recomputed
	}
	l := newLayout(dxv, xv, yv, gv)
	d, x, y, g := wholeFloats[T](dxv), wholeFloats[T](xv), wholeFloats[T](yv), wholeFloats[T](gv)
	sd, sx, sy, sg := l.innerStride(0), l.innerStride(1), l.innerStride(2), l.innerStride(3)
	direct := haveY && sd == 1 && sx == 1 && sy == 1 && sg == 1
	cost := gradCost + unaryCosts[op]
	b.eachRun(l, cost, func() func([]int, int) {
		var td, tx, ty, tg []T
		return func(o []int, n int) {
			if direct {
				unaryGradKernel(op, s, d[o[0]:o[0]+n], x[o[1]:o[1]+n], y[o[2]:o[2]+n], g[o[3]:o[3]+n])
				return
			}
			if td == nil {
				td, tx, ty, tg = make([]T, ewChunk), make([]T, ewChunk), make([]T, ewChunk), make([]T, ewChunk)
			}
			for j := 0; j < n; j += ewChunk {
				m := min(ewChunk, n-j)
				xs := ewOperand(x, o[1]+j*sx, m, sx, tx)
				gs := ewOperand(g, o[3]+j*sg, m, sg, tg)
				var ys []T
				if haveY {
					ys = ewOperand(y, o[2]+j*sy, m, sy, ty)
				} else {
					ys = ty[:m]
					unaryKernel(op, s, ys, xs)
				}
				ds := td[:m]
				if sd == 1 {
					ds = d[o[0]+j : o[0]+j+m]
				}
				unaryGradKernel(op, s, ds, xs, ys, gs)
				if sd != 1 {
					ewScatter(d, o[0]+j*sd, sd, ds)
				}
			}
		}
	})
}

// unaryGradKernel computes dx[i] = g[i]·op'(x[i]) for contiguous slices, with
// y[i] = op(x[i]).
func unaryGradKernel[T Float](op backend.UnaryOp, s backend.Scalars, dx, x, y, g []T) {
	n := len(dx)
	x, y, g = x[:n], y[:n], g[:n]
	if isF32[T]() && (op == backend.SiLU || op == backend.GELUTanh) {
		unaryGradExp32(op, dx, x, g)
		return
	}
	switch op {
	case backend.Neg:
		for i := range dx {
			dx[i] = -g[i]
		}
	case backend.Exp: // y
		for i := range dx {
			dx[i] = g[i] * y[i]
		}
	case backend.Log: // 1/x
		for i := range dx {
			dx[i] = g[i] / x[i]
		}
	case backend.Sqrt: // 1/(2y)
		for i := range dx {
			dx[i] = g[i] / (2 * y[i])
		}
	case backend.Rsqrt: // −y³/2
		for i := range dx {
			v := float64(y[i])
			dx[i] = T(-0.5 * float64(g[i]) * v * v * v)
		}
	case backend.Tanh: // 1 − y²
		for i := range dx {
			v := float64(y[i])
			dx[i] = T(float64(g[i]) * (1 - v*v))
		}
	case backend.Sigmoid: // y(1 − y)
		for i := range dx {
			v := float64(y[i])
			dx[i] = T(float64(g[i]) * v * (1 - v))
		}
	case backend.SiLU: // σ(1 + x(1 − σ))
		for i := range dx {
			v := float64(x[i])
			sg := 1 / (1 + math.Exp(-v))
			dx[i] = T(float64(g[i]) * sg * (1 + v*(1-sg)))
		}
	case backend.GELUTanh:
		// y = x·σ(2u), u = k(x + c x³): y' = σ + 2x σ(1−σ) k(1 + 3c x²).
		for i := range dx {
			v := float64(x[i])
			u := geluK * (v + geluC*v*v*v)
			sg := 1 / (1 + math.Exp(-2*u))
			dx[i] = T(float64(g[i]) * (sg + 2*v*sg*(1-sg)*geluK*(1+3*geluC*v*v)))
		}
	case backend.GELUErf: // Φ(x) + x φ(x)
		for i := range dx {
			v := float64(x[i])
			dx[i] = T(float64(g[i]) * (0.5*math.Erfc(-v*invSqrt2) + v*invSqrt2Pi*math.Exp(-0.5*v*v)))
		}
	case backend.ReLU: // 1 for x > 0 (NaN passes the gradient, as in PyTorch)
		for i := range dx {
			if x[i] <= 0 {
				dx[i] = 0
			} else {
				dx[i] = g[i]
			}
		}
	case backend.Abs: // sign(x), 0 at 0 and NaN
		for i := range dx {
			switch v := x[i]; {
			case v > 0:
				dx[i] = g[i]
			case v < 0:
				dx[i] = -g[i]
			default:
				dx[i] = 0
			}
		}
	case backend.PowScalar:
		powScalarGrad(dx, x, g, s.A)
	case backend.Clamp: // 1 where A ≤ x ≤ B, as PyTorch
		lo, hi := T(s.A), T(s.B)
		for i := range dx {
			if v := x[i]; lo <= v && v <= hi {
				dx[i] = g[i]
			} else {
				dx[i] = 0
			}
		}
	case backend.Affine: // A
		a := s.A
		for i := range dx {
			dx[i] = T(a * float64(g[i]))
		}
	case backend.RPowScalar: // A^x ln A; 0 where A = 0 and x ≥ 0, as PyTorch
		a := s.A
		la := math.Log(a)
		for i := range dx {
			if a == 0 && x[i] >= 0 {
				dx[i] = 0
			} else {
				dx[i] = T(float64(g[i]) * float64(y[i]) * la)
			}
		}
	case backend.RDivScalar: // −A/x²
		a := s.A
		for i := range dx {
			v := float64(x[i])
			dx[i] = T(-a * float64(g[i]) / (v * v))
		}
	case backend.Square: // 2x
		for i := range dx {
			dx[i] = 2 * x[i] * g[i]
		}
	case backend.Sign, backend.Round:
		for i := range dx {
			dx[i] = 0
		}
	default:
		panic(fmt.Sprintf("cpu: unary_grad: unknown op %v", op))
	}
}

// powScalarGrad computes dx = g·a·x^(a−1); a = 0 gives 0 everywhere
// (PyTorch's rule, which avoids 0·∞ at x = 0).
func powScalarGrad[T Float](dx, x, g []T, a float64) {
	n := len(dx)
	x, g = x[:n], g[:n]
	switch a {
	case 0:
		for i := range dx {
			dx[i] = 0
		}
	case 1:
		copy(dx, g)
	case 2:
		for i := range dx {
			dx[i] = 2 * x[i] * g[i]
		}
	case 3:
		for i := range dx {
			v := float64(x[i])
			dx[i] = T(3 * v * v * float64(g[i]))
		}
	default:
		for i := range dx {
			dx[i] = T(float64(g[i]) * a * math.Pow(float64(x[i]), a-1))
		}
	}
}

// ---------------------------------------------------------------------------
// Float32 exp-based ops

// usesExp32 reports whether op's float32 kernel is one of the fused exp
// kernels of exp.go.
func usesExp32(op backend.UnaryOp) bool {
	switch op {
	case backend.Exp, backend.Tanh, backend.Sigmoid, backend.SiLU, backend.GELUTanh:
		return true
	}
	return false
}

// unaryExp32 computes the exp-based ops for float32 (T is float32) with the
// slice kernels of exp.go: e^x in float64, the op's formula in float64 (as
// in unaryKernel), one rounding to float32.
func unaryExp32[T Float](op backend.UnaryOp, d, x []T) {
	dd, xx := asF32(d), asF32(x)
	switch op {
	case backend.Exp:
		expShiftSum32(dd, xx, 0, 1)
	case backend.Sigmoid:
		sigmoid32(sigSigmoid, dd, xx, nil)
	case backend.SiLU:
		sigmoid32(sigSiLU, dd, xx, nil)
	case backend.GELUTanh: // x·sigmoid(2u)
		sigmoid32(sigGELUTanh, dd, xx, nil)
	case backend.Tanh:
		// tanh|x| = 1 − 2/(1 + e^(2|x|)); near 0, where that cancels, the
		// Taylor series to x⁷ (error below 1e-13 relative for |x| < 1/32).
		sigmoid32(sigTanh, dd, xx, nil)
	}
}

// unaryGradExp32 computes the SiLU and GELU-tanh gradients for float32
// (the formulas of unaryGradKernel) with sigmoid32.
func unaryGradExp32[T Float](op backend.UnaryOp, dx, x, g []T) {
	if op == backend.SiLU {
		sigmoid32(sigSiLUGrad, asF32(dx), asF32(x), asF32(g))
	} else {
		sigmoid32(sigGELUGrad, asF32(dx), asF32(x), asF32(g))
	}
}

// ---------------------------------------------------------------------------
// Binary

// Binary computes dst = a op b; a and b carry broadcast strides.
// Comparisons write 1 or 0.
func (b *Backend) Binary(op backend.BinaryOp, dst, a, bv backend.View) {
	if op >= backend.NumBinaryOps {
		panic(fmt.Sprintf("cpu: binary: unknown op %v", op))
	}
	if ewCheckFloat("binary", dst, a, bv) == backend.Float32 {
		binary[float32](b, op, dst, a, bv)
	} else {
		binary[float64](b, op, dst, a, bv)
	}
}

func binary[T Float](b *Backend, op backend.BinaryOp, dst, av, bv backend.View) {
	l := newLayout(dst, av, bv)
	d, x, y := wholeFloats[T](dst), wholeFloats[T](av), wholeFloats[T](bv)
	sd, sa, sb := l.innerStride(0), l.innerStride(1), l.innerStride(2)
	// With unit or zero strides everywhere (and a unit-stride dst) a run is
	// processed in place in one piece; otherwise in chunks through buffers.
	direct := sd == 1 && (sa == 0 || sa == 1) && (sb == 0 || sb == 1)
	cost := binaryCost
	if op == backend.Pow {
		cost += powCost
	}
	b.eachRun(l, cost, func() func([]int, int) {
		var td, ta, tb []T
		return func(o []int, n int) {
			pd, pa, pb := o[0], o[1], o[2]
			chunk := n
			if !direct {
				chunk = ewChunk
				if td == nil {
					td, ta, tb = make([]T, ewChunk), make([]T, ewChunk), make([]T, ewChunk)
				}
			}
			for j := 0; j < n; j += chunk {
				m := min(chunk, n-j)
				var ds []T
				if sd == 1 {
					ds = d[pd+j : pd+j+m]
				} else {
					ds = td[:m]
				}
				switch {
				case sa == 0 && sb == 0:
					var one [1]T
					binaryVV(op, one[:], x[pa:pa+1], y[pb:pb+1])
					ewFill(ds, 0, m, 1, one[0])
				case sb == 0:
					binaryVS(op, ds, ewOperand(x, pa+j*sa, m, sa, ta), y[pb])
				case sa == 0:
					binarySV(op, ds, x[pa], ewOperand(y, pb+j*sb, m, sb, tb))
				default:
					binaryVV(op, ds, ewOperand(x, pa+j*sa, m, sa, ta), ewOperand(y, pb+j*sb, m, sb, tb))
				}
				if sd != 1 {
					ewScatter(d, pd+j*sd, sd, ds)
				}
			}
		}
	})
}

// ewBool converts a comparison result to 1 or 0.
func ewBool[T Float](c bool) T {
	if c {
		return 1
	}
	return 0
}

// binaryVV computes d[i] = a[i] op b[i] for contiguous slices.
func binaryVV[T Float](op backend.BinaryOp, d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case backend.Add:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case backend.Sub:
		for i := range d {
			d[i] = a[i] - b[i]
		}
	case backend.Mul:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case backend.Div:
		for i := range d {
			d[i] = a[i] / b[i]
		}
	case backend.Pow:
		for i := range d {
			d[i] = T(math.Pow(float64(a[i]), float64(b[i])))
		}
	case backend.Maximum: // NaN propagates
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	case backend.Minimum:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case backend.Eq:
		for i := range d {
			d[i] = ewBool[T](a[i] == b[i])
		}
	case backend.Ne:
		for i := range d {
			d[i] = ewBool[T](a[i] != b[i])
		}
	case backend.Lt:
		for i := range d {
			d[i] = ewBool[T](a[i] < b[i])
		}
	case backend.Le:
		for i := range d {
			d[i] = ewBool[T](a[i] <= b[i])
		}
	case backend.Gt:
		for i := range d {
			d[i] = ewBool[T](a[i] > b[i])
		}
	case backend.Ge:
		for i := range d {
			d[i] = ewBool[T](a[i] >= b[i])
		}
	default:
		panic(fmt.Sprintf("cpu: binary: unknown op %v", op))
	}
}

// binaryVS computes d[i] = a[i] op c for a contiguous a and a scalar c.
func binaryVS[T Float](op backend.BinaryOp, d, a []T, c T) {
	a = a[:len(d)]
	switch op {
	case backend.Add:
		for i := range d {
			d[i] = a[i] + c
		}
	case backend.Sub:
		for i := range d {
			d[i] = a[i] - c
		}
	case backend.Mul:
		for i := range d {
			d[i] = a[i] * c
		}
	case backend.Div:
		for i := range d {
			d[i] = a[i] / c
		}
	case backend.Pow:
		powScalar(d, a, float64(c))
	case backend.Maximum:
		for i := range d {
			d[i] = max(a[i], c)
		}
	case backend.Minimum:
		for i := range d {
			d[i] = min(a[i], c)
		}
	case backend.Eq:
		for i := range d {
			d[i] = ewBool[T](a[i] == c)
		}
	case backend.Ne:
		for i := range d {
			d[i] = ewBool[T](a[i] != c)
		}
	case backend.Lt:
		for i := range d {
			d[i] = ewBool[T](a[i] < c)
		}
	case backend.Le:
		for i := range d {
			d[i] = ewBool[T](a[i] <= c)
		}
	case backend.Gt:
		for i := range d {
			d[i] = ewBool[T](a[i] > c)
		}
	case backend.Ge:
		for i := range d {
			d[i] = ewBool[T](a[i] >= c)
		}
	default:
		panic(fmt.Sprintf("cpu: binary: unknown op %v", op))
	}
}

// binarySV computes d[i] = c op b[i] for a scalar c and a contiguous b,
// reusing binaryVS where the op commutes or mirrors.
func binarySV[T Float](op backend.BinaryOp, d []T, c T, b []T) {
	b = b[:len(d)]
	switch op {
	case backend.Add, backend.Mul, backend.Maximum, backend.Minimum, backend.Eq, backend.Ne:
		binaryVS(op, d, b, c)
	case backend.Lt: // c < b ⇔ b > c
		binaryVS(backend.Gt, d, b, c)
	case backend.Le:
		binaryVS(backend.Ge, d, b, c)
	case backend.Gt:
		binaryVS(backend.Lt, d, b, c)
	case backend.Ge:
		binaryVS(backend.Le, d, b, c)
	case backend.Sub:
		for i := range d {
			d[i] = c - b[i]
		}
	case backend.Div:
		for i := range d {
			d[i] = c / b[i]
		}
	case backend.Pow:
		a := float64(c)
		for i := range d {
			d[i] = T(math.Pow(a, float64(b[i])))
		}
	default:
		panic(fmt.Sprintf("cpu: binary: unknown op %v", op))
	}
}

// ---------------------------------------------------------------------------
// Where

// anyElem is any element type a buffer can hold.
type anyElem interface{ ~float32 | ~float64 | ~int32 }

// wholeOf returns the entire buffer of v as []E, ignoring v.Offset; E must
// match the dtype.
func wholeOf[E anyElem](v backend.View) []E {
	c := buf(v)
	var z E
	switch any(z).(type) {
	case float32:
		return any(c.F32).([]E)
	case float64:
		return any(c.F64).([]E)
	default:
		return any(c.I32).([]E)
	}
}

// Where computes dst = cond ≠ 0 ? a : b with broadcast views. dst, a and b
// share a dtype (float32, float64 or int32); cond may be any dtype.
func (b *Backend) Where(dst, cond, a, bv backend.View) {
	dt := dst.DType()
	if a.DType() != dt || bv.DType() != dt {
		panic(fmt.Sprintf("cpu: where: mixed dtypes %v, %v and %v", dt, a.DType(), bv.DType()))
	}
	switch dt {
	case backend.Float32:
		whereCondKernel[float32](b, dst, cond, a, bv)
	case backend.Float64:
		whereCondKernel[float64](b, dst, cond, a, bv)
	case backend.Int32:
		whereCondKernel[int32](b, dst, cond, a, bv)
	default:
		panic(badDType("where", dt))
	}
}

func whereCondKernel[E anyElem](b *Backend, dst, cond, a, bv backend.View) {
	switch cond.DType() {
	case backend.Float32:
		whereKernel[E, float32](b, dst, cond, a, bv)
	case backend.Float64:
		whereKernel[E, float64](b, dst, cond, a, bv)
	case backend.Int32:
		whereKernel[E, int32](b, dst, cond, a, bv)
	default:
		panic(badDType("where", cond.DType()))
	}
}

func whereKernel[E, C anyElem](b *Backend, dst, cond, av, bv backend.View) {
	l := newLayout(dst, cond, av, bv)
	d, c, x, y := wholeOf[E](dst), wholeOf[C](cond), wholeOf[E](av), wholeOf[E](bv)
	sd, sc, sa, sb := l.innerStride(0), l.innerStride(1), l.innerStride(2), l.innerStride(3)
	b.eachRun(l, whereCost, func() func([]int, int) {
		return func(o []int, n int) {
			pd, pc, pa, pb := o[0], o[1], o[2], o[3]
			if sd == 1 && sc == 1 {
				dd, cc := d[pd:pd+n], c[pc:pc+n]
				switch {
				case sa == 1 && sb == 1:
					whereVV(dd, cc, x[pa:pa+n], y[pb:pb+n])
					return
				case sa == 0 && sb == 1: // masked fill of b's complement
					whereSV(dd, cc, x[pa], y[pb:pb+n])
					return
				case sa == 1 && sb == 0: // masked fill
					whereVS(dd, cc, x[pa:pa+n], y[pb])
					return
				}
			}
			for ; n > 0; n-- {
				if c[pc] != 0 {
					d[pd] = x[pa]
				} else {
					d[pd] = y[pb]
				}
				pd, pc, pa, pb = pd+sd, pc+sc, pa+sa, pb+sb
			}
		}
	})
}

func whereVV[E, C anyElem](d []E, c []C, a, b []E) {
	c, a, b = c[:len(d)], a[:len(d)], b[:len(d)]
	for i := range d {
		if c[i] != 0 {
			d[i] = a[i]
		} else {
			d[i] = b[i]
		}
	}
}

func whereSV[E, C anyElem](d []E, c []C, a E, b []E) {
	c, b = c[:len(d)], b[:len(d)]
	for i := range d {
		if c[i] != 0 {
			d[i] = a
		} else {
			d[i] = b[i]
		}
	}
}

func whereVS[E, C anyElem](d []E, c []C, a []E, b E) {
	c, a = c[:len(d)], a[:len(d)]
	for i := range d {
		if c[i] != 0 {
			d[i] = a[i]
		} else {
			d[i] = b
		}
	}
}
