package metal

// Fill, Copy, Unary, UnaryGrad, Binary and Where (ops_elementwise.go)
// against the CPU backend: every op, over strided, transposed, broadcast
// and many-dimension views, in place; the 16-bit storage dtypes bit for
// bit in Fill and Copy against package forge/half and the CPU (every
// float16 and bfloat16 widened, narrowing on many float32 and int32
// values), and in the arithmetic ops against the CPU's float32 results on
// the same rounded inputs (ops_layout_test.go for the bounds); the results
// under every thread schedule; the refused dtypes.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// The views of the elementwise tests, shared by their float32 and 16-bit
// versions.
var (
	fillSpecs = []vspec{contig(1), contig(7, 13), {shape: []int{3, 5}, strides: []int{10, 2}, off: 3}, manyDims()}
	copyCases = []struct{ dst, src vspec }{
		{contig(257), contig(257)},
		{contig(7, 13), vspec{shape: []int{7, 13}, strides: []int{1, 7}}},                // transpose
		{contig(5, 6, 7), vspec{shape: []int{5, 6, 7}, strides: []int{0, 7, 1}, off: 2}}, // broadcast
		{vspec{shape: []int{4, 3}, strides: []int{6, 2}, off: 1}, vspec{shape: []int{4, 3}, strides: []int{0, 0}, off: 4}},
		{manyDims(), vspec{shape: manyDims().shape, strides: make([]int, 10)}},
		{contig(manyDims().shape...), manyDims()},
	}
	unaryShapes = []struct{ dst, src vspec }{
		{contig(1001), contig(1001)},
		{contig(7, 13), vspec{shape: []int{7, 13}, strides: []int{0, 1}, off: 3}}, // broadcast rows
		{vspec{shape: []int{5, 3}, strides: []int{1, 5}}, vspec{shape: []int{5, 3}, strides: []int{3, 1}}},
		{contig(manyDims().shape...), manyDims()},
	}
	binaryCases = []struct{ dst, a, b vspec }{
		{contig(1000), contig(1000), contig(1000)},
		{contig(5, 6, 7), vspec{shape: []int{5, 6, 7}, strides: []int{7, 0, 1}}, vspec{shape: []int{5, 6, 7}, strides: []int{0, 7, 1}, off: 2}},
		{contig(33, 17), vspec{shape: []int{33, 17}, strides: []int{1, 33}}, vspec{shape: []int{33, 17}, strides: []int{0, 0}, off: 4}},
		{contig(3, 4), vspec{shape: []int{3, 4}, strides: []int{0, 0}}, vspec{shape: []int{3, 4}, strides: []int{4, 1}}},
		{contig(manyDims().shape...), manyDims(), vspec{shape: manyDims().shape, strides: make([]int, 10), off: 1}},
	}
	whereShapes = []struct{ dst, c, a, b vspec }{
		{contig(513), contig(513), contig(513), contig(513)},
		{contig(6, 7), vspec{shape: []int{6, 7}, strides: []int{1, 6}}, vspec{shape: []int{6, 7}, strides: []int{0, 1}}, vspec{shape: []int{6, 7}, strides: []int{0, 0}, off: 2}},
		{contig(manyDims().shape...), manyDims(), vspec{shape: manyDims().shape, strides: make([]int, 10)}, manyDims()},
	}
)

func TestOpsFill(t *testing.T) {
	e := newOpsEnv(t)
	for _, s := range fillSpecs {
		for _, dt := range []backend.DType{backend.Float32, backend.Int32} {
			p := e.newPair(dt, s, func(i int) float64 { return float64(i % 7) })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Fill(v(p), -2.75) })
			e.compare(fmt.Sprintf("fill %v %v", dt, s), p, 0)
		}
	}
}

func TestOpsCopy(t *testing.T) {
	e := newOpsEnv(t)
	kinds := [][2]backend.DType{
		{backend.Float32, backend.Float32}, {backend.Int32, backend.Int32},
		{backend.Int32, backend.Float32}, {backend.Float32, backend.Int32},
	}
	for _, c := range copyCases {
		for _, k := range kinds {
			src := e.newPair(k[1], c.src, e.uniform(-50, 50))
			dst := e.newPair(k[0], c.dst, func(int) float64 { return 9 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(dst), v(src)) })
			e.compare(fmt.Sprintf("copy %v←%v dst %v src %v", k[0], k[1], c.dst, c.src), dst, 0)
		}
	}
}

// unaryDomain returns inputs inside op's domain.
func (e *opsEnv) unaryDomain(op backend.UnaryOp) func(int) float64 {
	switch op {
	case backend.Log, backend.Sqrt, backend.Rsqrt, backend.PowScalar, backend.RDivScalar:
		return e.uniform(0.05, 6)
	case backend.Exp, backend.RPowScalar:
		return e.uniform(-8, 8)
	}
	return func(int) float64 { return 3 * e.rng.NormFloat64() }
}

var unaryScalars = map[backend.UnaryOp][]backend.Scalars{
	backend.PowScalar:  {{A: 2.5}, {A: 2}, {A: 3}, {A: -1}, {A: 0}, {A: -0.5}},
	backend.Clamp:      {{A: -0.7, B: 0.4}},
	backend.Affine:     {{A: 1.0 / 3, B: 1.5}, {A: -3}},
	backend.RPowScalar: {{A: 1.7}, {A: 0.5}},
	backend.RDivScalar: {{A: 2}},
}

func TestOpsUnary(t *testing.T) {
	e := newOpsEnv(t)
	for op := backend.Neg; op < backend.NumUnaryOps; op++ {
		ss := unaryScalars[op]
		if ss == nil {
			ss = []backend.Scalars{{}}
		}
		worst := 0.0
		for _, s := range ss {
			for _, sh := range unaryShapes {
				src := e.newPair(backend.Float32, sh.src, e.unaryDomain(op))
				dst := e.newPair(backend.Float32, sh.dst, func(int) float64 { return 7 })
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Unary(op, s, v(dst), v(src)) })
				worst = max(worst, e.compare(fmt.Sprintf("unary %v %v %v", op, s, sh.src), dst, opsTol))
			}
			// In place.
			x := e.newPair(backend.Float32, contig(33, 3), e.unaryDomain(op))
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Unary(op, s, v(x), v(x)) })
			worst = max(worst, e.compare(fmt.Sprintf("unary %v %v in place", op, s), x, opsTol))
		}
		t.Logf("unary %-12v maxdiff %.2e", op, worst)
	}
}

func TestOpsUnaryGrad(t *testing.T) {
	e := newOpsEnv(t)
	for op := backend.Neg; op < backend.NumUnaryOps; op++ {
		ss := unaryScalars[op]
		if ss == nil {
			ss = []backend.Scalars{{}}
		}
		worst := 0.0
		for _, s := range ss {
			for _, haveY := range []bool{true, false} {
				sh := vspec{shape: []int{9, 37}, strides: []int{1, 9}}
				x := e.newPair(backend.Float32, contig(37, 9), e.unaryDomain(op))
				xv := x
				xv.dev.Shape, xv.dev.Strides = sh.shape, sh.strides
				xv.ref.Shape, xv.ref.Strides = sh.shape, sh.strides
				y := e.newPair(backend.Float32, contig(9, 37), func(int) float64 { return 0 })
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Unary(op, s, v(y), v(xv)) })
				g := e.newPair(backend.Float32, vspec{shape: []int{9, 37}, strides: []int{0, 1}, off: 1}, e.normal)
				dx := e.newPair(backend.Float32, contig(9, 37), func(int) float64 { return 5 })
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					yy := v(y)
					if !haveY {
						yy = backend.View{}
					}
					be.UnaryGrad(op, s, v(dx), v(xv), yy, v(g))
				})
				worst = max(worst, e.compare(fmt.Sprintf("unary_grad %v %v y=%v", op, s, haveY), dx, opsTol))
			}
		}
		t.Logf("unary_grad %-12v maxdiff %.2e", op, worst)
	}
}

// binaryInputs returns generators of op's operands: a positive base for
// Pow, and ties for the comparisons.
func (e *opsEnv) binaryInputs(op backend.BinaryOp) (ga, gb func(int) float64) {
	switch {
	case op == backend.Pow:
		return e.uniform(0.1, 4), e.uniform(-3, 3)
	case op >= backend.Eq: // ties matter for comparisons
		g := func(int) float64 { return float64(e.rng.IntN(5)) / 2 }
		return g, g
	}
	return e.normal, e.normal
}

func TestOpsBinary(t *testing.T) {
	e := newOpsEnv(t)
	for op := backend.Add; op < backend.NumBinaryOps; op++ {
		worst := 0.0
		for _, c := range binaryCases {
			ga, gb := e.binaryInputs(op)
			a := e.newPair(backend.Float32, c.a, ga)
			b := e.newPair(backend.Float32, c.b, gb)
			dst := e.newPair(backend.Float32, c.dst, func(int) float64 { return 3 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Binary(op, v(dst), v(a), v(b)) })
			worst = max(worst, e.compare(fmt.Sprintf("binary %v dst %v a %v b %v", op, c.dst, c.a, c.b), dst, opsTol))
		}
		t.Logf("binary %-8v maxdiff %.2e", op, worst)
	}
	// Negative bases with integer exponents, NaN through maximum/minimum.
	a := e.newPair(backend.Float32, contig(6), func(i int) float64 { return []float64{-2, -1.5, 0, math.NaN(), 2, -3}[i] })
	b := e.newPair(backend.Float32, contig(6), func(i int) float64 { return []float64{3, 2, 0, 1, math.NaN(), -2}[i] })
	for _, op := range []backend.BinaryOp{backend.Pow, backend.Maximum, backend.Minimum} {
		dst := e.newPair(backend.Float32, contig(6), func(int) float64 { return 0 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Binary(op, v(dst), v(a), v(b)) })
		e.compare(fmt.Sprintf("binary %v special values", op), dst, opsTol)
	}
}

func TestOpsWhere(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range []backend.DType{backend.Float32, backend.Int32} {
		for _, cdt := range []backend.DType{backend.Float32, backend.Int32} {
			for _, sh := range whereShapes {
				cond := e.newPair(cdt, sh.c, func(i int) float64 { return []float64{0, 1, -2, 0, 3}[e.rng.IntN(5)] })
				a := e.newPair(dt, sh.a, e.uniform(-100, 100))
				b := e.newPair(dt, sh.b, e.uniform(-100, 100))
				dst := e.newPair(dt, sh.dst, func(int) float64 { return 1 })
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Where(v(dst), v(cond), v(a), v(b)) })
				e.compare(fmt.Sprintf("where %v cond %v %v", dt, cdt, sh.c), dst, 0)
			}
		}
	}
}

// TestHalfWidenExhaustive widens every float16 and bfloat16 bit pattern to
// float32 (bits equal to forge/half's, NaN payloads included), and
// converts each to the other 16-bit format (bits equal to the CPU's).
func TestHalfWidenExhaustive(t *testing.T) {
	e := newOpsEnv(t)
	const n = 1 << 16
	all := make([]uint16, n)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, dt := range halfTypes {
		src := e.dev.Alloc(dt, n)
		e.dev.Write(src, all)
		dst := e.dev.Alloc(backend.Float32, n)
		sv := backend.View{Buf: src, Shape: []int{n}, Strides: []int{1}}
		e.dev.Copy(backend.View{Buf: dst, Shape: []int{n}, Strides: []int{1}}, sv)
		got := make([]float32, n)
		e.dev.Read(dst, got)
		bad := 0
		for i, h := range all {
			want := widen16(dt, h)
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad == 0 {
					t.Errorf("%v %#04x → float32: %#08x, forge/half gives %#08x", dt, h, math.Float32bits(got[i]), math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%v → float32: %d of %d patterns differ", dt, bad, n)
		}
		// To the other 16-bit format, against the CPU.
		other := backend.BFloat16
		if dt == backend.BFloat16 {
			other = backend.Float16
		}
		p := e.newPair(other, contig(n), func(int) float64 { return 0 })
		rsrc := e.ref.Alloc(dt, n)
		e.ref.Write(rsrc, all)
		e.dev.Copy(p.dev, sv)
		e.ref.Copy(p.ref, backend.View{Buf: rsrc, Shape: []int{n}, Strides: []int{1}})
		e.compareBits16(fmt.Sprintf("%v → %v, every pattern", dt, other), p)
	}
}

// narrowingValues are float32 inputs for the narrowing conversions: every
// special class of both formats (zeros, subnormals and their boundaries,
// the overflow threshold, NaNs with payloads, infinities), every exact tie
// between neighbouring finite 16-bit values of either format with its two
// float32 neighbours (each sign), and random bit patterns and magnitudes.
func narrowingValues(rng *rand.Rand) []float32 {
	var v []float32
	add := func(x float32) { v = append(v, x, -x) }
	for _, x := range []float32{0, 1, 65504, 65519, 65519.996, 65520, 65536, 1e10,
		float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -25)), float32(math.Ldexp(1.0000001, -25)),
		float32(math.Ldexp(1, -14)), float32(math.Ldexp(1023, -24)), float32(math.Ldexp(1, -126)),
		math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.Inf(1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0x7f800001), math.Float32frombits(0x7fa5a5a5),
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7fffff), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000)} {
		add(x)
	}
	// Every tie of both formats (and its float32 neighbours).
	for _, dt := range halfTypes {
		for h := uint16(0); h < 0x7fff; h++ {
			lo, hi := widen16(dt, h), widen16(dt, h+1)
			if math.IsNaN(float64(hi)) || math.IsInf(float64(hi), 0) || math.IsNaN(float64(lo)) || math.IsInf(float64(lo), 0) {
				continue
			}
			mid := float32((float64(lo) + float64(hi)) / 2) // exact: a tie
			add(mid)
			add(math.Nextafter32(mid, 0))
			add(math.Nextafter32(mid, float32(math.Inf(1))))
		}
	}
	for i := 0; i < 30000; i++ {
		v = append(v, math.Float32frombits(rng.Uint32()))
	}
	for i := 0; i < 10000; i++ {
		v = append(v, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(40)-20))))
	}
	return v
}

// TestHalfNarrowing converts many float32 and int32 values to both 16-bit
// formats: the bits must be forge/half's (float32) and the CPU's (int32,
// which rounds the exact integer once), and 16-bit → int32 the CPU's.
func TestHalfNarrowing(t *testing.T) {
	e := newOpsEnv(t)
	vals := narrowingValues(e.rng)
	n := len(vals)
	src := e.dev.Alloc(backend.Float32, n)
	e.dev.Write(src, vals)
	for _, dt := range halfTypes {
		dst := e.dev.Alloc(dt, n)
		e.dev.Copy(backend.View{Buf: dst, Shape: []int{n}, Strides: []int{1}}, backend.View{Buf: src, Shape: []int{n}, Strides: []int{1}})
		got := make([]uint16, n)
		e.dev.Read(dst, got)
		bad := 0
		for i, x := range vals {
			if want := narrow16(dt, x); got[i] != want {
				if bad < 5 {
					t.Errorf("float32 %#08x (%g) → %v: %#04x, forge/half gives %#04x", math.Float32bits(x), x, dt, got[i], want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("float32 → %v: %d of %d values differ", dt, bad, n)
		}
		t.Logf("float32 → %v: %d values, all bits equal to forge/half: %v", dt, n, bad == 0)

		// int32 → 16-bit: the full range, integers at and around the
		// double-rounding cases (2^24 + 2^16 + 1 and friends), the ends.
		ints := []int32{0, 1, -1, 65504, 65519, 65520, 65521, -65520, 1<<24 + 1<<16 + 1, 1<<24 + 1<<16, 1<<24 + 1<<16 - 1,
			1<<24 + 1, 1<<25 + 3, math.MaxInt32, math.MinInt32, math.MinInt32 + 1, -(1<<24 + 1<<16 + 1)}
		for i := 0; i < 20000; i++ {
			x := int32(e.rng.Uint32())
			if i%2 == 0 {
				x >>= e.rng.IntN(31)
			}
			ints = append(ints, x)
		}
		ip := e.newPair(backend.Int32, contig(len(ints)), func(i int) float64 { return float64(ints[i]) })
		hp := e.newPair(dt, contig(len(ints)), func(int) float64 { return 0 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(hp), v(ip)) })
		e.compareBits16(fmt.Sprintf("int32 → %v", dt), hp)

		// 16-bit → int32 on values well inside int32's range (beyond it the
		// conversion is the platform's: Go and x86 give MinInt32, a GPU
		// saturates).
		hv := e.newPair(dt, contig(5000), func(int) float64 {
			return e.rng.NormFloat64() * math.Pow(2, float64(e.rng.IntN(26)))
		})
		if dt == backend.Float16 {
			hv = e.newPair(dt, contig(5000), e.uniform(-65504, 65504))
		}
		iv := e.newPair(backend.Int32, contig(5000), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(iv), v(hv)) })
		e.compare(fmt.Sprintf("%v → int32", dt), iv, 0)
	}
}

// TestHalfCopyLayouts runs Copy between every pair with a 16-bit side over
// strided, transposed, broadcast and many-dimension views, bit for bit
// against the CPU.
func TestHalfCopyLayouts(t *testing.T) {
	e := newOpsEnv(t)
	all := []backend.DType{backend.Float32, backend.Int32, backend.Float16, backend.BFloat16}
	gen := e.uniform(-3000, 3000)
	for _, c := range copyCases {
		for _, ddt := range all {
			for _, sdt := range all {
				if !ddt.IsHalf() && !sdt.IsHalf() {
					continue
				}
				src := e.newPair(sdt, c.src, gen)
				dst := e.newPair(ddt, c.dst, func(int) float64 { return 9 })
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(dst), v(src)) })
				what := fmt.Sprintf("copy %v←%v dst %v src %v", ddt, sdt, c.dst, c.src)
				if ddt.IsHalf() {
					e.compareBits16(what, dst)
				} else {
					e.compare(what, dst, 0)
				}
			}
		}
	}
}

func TestHalfFill(t *testing.T) {
	e := newOpsEnv(t)
	values := []float64{-2.75, 1.0 / 3, 65519.99, 65520, 1e-8, 3e-8, 1 + 1.0/256 + 1e-12, math.Inf(-1), math.NaN(), 1e39}
	for _, s := range fillSpecs {
		for _, dt := range halfTypes {
			for _, v := range values {
				p := e.newPair(dt, s, func(i int) float64 { return float64(i % 7) })
				e.both(func(be backend.Backend, vw func(pair) backend.View) { be.Fill(vw(p), v) })
				e.compareBits16(fmt.Sprintf("fill %v %v with %g", dt, s, v), p)
			}
		}
	}
}

func TestHalfUnary(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for op := backend.Neg; op < backend.NumUnaryOps; op++ {
			ss := unaryScalars[op]
			if ss == nil {
				ss = []backend.Scalars{{}}
			}
			worst, exact, cnt := 0.0, 0.0, 0
			for _, s := range ss {
				for _, sh := range unaryShapes {
					src16, src32 := e.newPair16(dt, sh.src, e.unaryDomain(op))
					dst16, dst32 := e.newPair16(dt, sh.dst, func(int) float64 { return 7 })
					e.dev.Unary(op, s, dst16.dev, src16.dev)
					e.ref.Unary(op, s, dst32.ref, src32.ref)
					w, x := e.compareRounded(fmt.Sprintf("unary %v %v %v %v", dt, op, s, sh.src), dst16, dst32)
					worst, exact, cnt = max(worst, w), exact+x, cnt+1
				}
			}
			t.Logf("unary %-9v %-12v worst %.2f ulp16 off the CPU's float32 result; %.4f of elements equal it rounded", dt, op, worst, exact/float64(cnt))
		}
		// In place, and UnaryGrad (all four views of the dtype).
		x16, x32 := e.newPair16(dt, contig(33, 3), e.unaryDomain(backend.Tanh))
		e.dev.Unary(backend.Tanh, backend.Scalars{}, x16.dev, x16.dev)
		e.ref.Unary(backend.Tanh, backend.Scalars{}, x32.ref, x32.ref)
		e.compareRounded(fmt.Sprintf("unary %v tanh in place", dt), x16, x32)
		for _, op := range []backend.UnaryOp{backend.Tanh, backend.SiLU, backend.GELUTanh, backend.Exp} {
			xx16, xx32 := e.newPair16(dt, contig(9, 37), e.unaryDomain(op))
			y16, y32 := e.newPair16(dt, contig(9, 37), func(int) float64 { return 0 })
			// y from the rounded x on both, then rounded: the CPU gets y16's bits widened.
			e.dev.Unary(op, backend.Scalars{}, y16.dev, xx16.dev)
			yb := make([]uint16, y16.n)
			e.dev.Read(y16.dev.Buf, yb)
			yw := make([]float32, len(yb))
			for i, h := range yb {
				yw[i] = widen16(dt, h)
			}
			e.ref.Write(y32.ref.Buf, yw)
			g16, g32 := e.newPair16(dt, vspec{shape: []int{9, 37}, strides: []int{0, 1}, off: 1}, e.normal)
			dx16, dx32 := e.newPair16(dt, contig(9, 37), func(int) float64 { return 5 })
			e.dev.UnaryGrad(op, backend.Scalars{}, dx16.dev, xx16.dev, y16.dev, g16.dev)
			e.ref.UnaryGrad(op, backend.Scalars{}, dx32.ref, xx32.ref, y32.ref, g32.ref)
			w, _ := e.compareRounded(fmt.Sprintf("unary_grad %v %v", dt, op), dx16, dx32)
			t.Logf("unary_grad %-9v %-10v worst %.2f ulp16", dt, op, w)
		}
	}
}

// TestHalfUnaryGrad: UnaryGrad on float16 and bfloat16 views for every op
// and scalar set of TestOpsUnaryGrad, with y given (the device's 16-bit
// forward, its bits widened for the float32 twin) and recomputed from x, x
// a transposed view and g broadcast over rows; each dx against the float32
// kernel on the widened inputs and the CPU (check16, at TestOpsUnaryGrad's
// tolerance).
func TestHalfUnaryGrad(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for op := backend.Neg; op < backend.NumUnaryOps; op++ {
			ss := unaryScalars[op]
			if ss == nil {
				ss = []backend.Scalars{{}}
			}
			var worst halfWorst
			for _, s := range ss {
				for _, haveY := range []bool{true, false} {
					x16, x32 := e.newPair16(dt, vspec{shape: []int{9, 37}, strides: []int{1, 9}}, e.unaryDomain(op))
					y16 := e.newPair(dt, contig(9, 37), mhFill(0))
					e.dev.Unary(op, s, y16.dev, x16.dev)
					yb := make([]uint16, y16.n)
					e.dev.Read(y16.dev.Buf, yb)
					y32 := e.newPair(backend.Float32, contig(9, 37), func(i int) float64 { return float64(widen16(dt, yb[i])) })
					g16, g32 := e.newPair16(dt, vspec{shape: []int{9, 37}, strides: []int{0, 1}, off: 1}, e.normal)
					dx16, dx32 := e.newPair16(dt, contig(9, 37), mhFill(5))
					y, yv := y16.dev, func(v func(pair) backend.View) backend.View { return v(y32) }
					if !haveY {
						y, yv = backend.View{}, func(func(pair) backend.View) backend.View { return backend.View{} }
					}
					e.dev.UnaryGrad(op, s, dx16.dev, x16.dev, y, g16.dev)
					e.both(func(be backend.Backend, v func(pair) backend.View) {
						be.UnaryGrad(op, s, v(dx32), v(x32), yv(v), v(g32))
					})
					worst.add(e.check16(fmt.Sprintf("unary_grad %v %v %v y=%v", dt, op, s, haveY), dx16, dx32, tolOps))
				}
			}
			t.Logf("unary_grad %-9v %-12v %v", dt, op, worst)
		}
	}
}

func TestHalfBinary(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for op := backend.Add; op < backend.NumBinaryOps; op++ {
			worst, exact, cnt := 0.0, 0.0, 0
			for _, c := range binaryCases {
				ga, gb := e.binaryInputs(op)
				a16, a32 := e.newPair16(dt, c.a, ga)
				b16, b32 := e.newPair16(dt, c.b, gb)
				d16, d32 := e.newPair16(dt, c.dst, func(int) float64 { return 3 })
				e.dev.Binary(op, d16.dev, a16.dev, b16.dev)
				e.ref.Binary(op, d32.ref, a32.ref, b32.ref)
				w, x := e.compareRounded(fmt.Sprintf("binary %v %v dst %v", dt, op, c.dst), d16, d32)
				worst, exact, cnt = max(worst, w), exact+x, cnt+1
			}
			t.Logf("binary %-9v %-8v worst %.2f ulp16; %.4f exact", dt, op, worst, exact/float64(cnt))
		}
		// Overflow to ±Inf (float16), NaN through maximum, and a sum that
		// rounds: computed in float32, rounded once.
		a16, a32 := e.newPair16(dt, contig(5), func(i int) float64 { return []float64{60000, -60000, math.NaN(), 1, 2049}[i] })
		b16, b32 := e.newPair16(dt, contig(5), func(i int) float64 { return []float64{60000, -60000, 1, math.NaN(), 1}[i] })
		for _, op := range []backend.BinaryOp{backend.Add, backend.Maximum} {
			d16, d32 := e.newPair16(dt, contig(5), func(int) float64 { return 0 })
			e.dev.Binary(op, d16.dev, a16.dev, b16.dev)
			e.ref.Binary(op, d32.ref, a32.ref, b32.ref)
			got := make([]uint16, 5)
			e.dev.Read(d16.dev.Buf, got)
			want := make([]float32, 5)
			e.ref.Read(d32.ref.Buf, want)
			for i := range got {
				w := narrow16(dt, want[i])
				if got[i] != w && !(math.IsNaN(float64(want[i])) && math.IsNaN(float64(widen16(dt, got[i])))) {
					t.Errorf("binary %v %v special %d: %#04x, want %#04x (%g rounded)", dt, op, i, got[i], w, want[i])
				}
			}
		}
	}
}

// TestHalfWhere: Where with 16-bit data or a 16-bit cond (the CPU's Where
// takes neither: its reference runs on the float32 twins, which hold the
// same values, and the data moves unconverted).
func TestHalfWhere(t *testing.T) {
	e := newOpsEnv(t)
	all := []backend.DType{backend.Float32, backend.Int32, backend.Float16, backend.BFloat16}
	// mk returns the view on the device (dtype dt) and its CPU twin (dt,
	// or float32 for a 16-bit dt).
	mk := func(dt backend.DType, s vspec, gen func(int) float64) (dev, ref backend.View, p16 pair) {
		if dt.IsHalf() {
			p, p32 := e.newPair16(dt, s, gen)
			return p.dev, p32.ref, p
		}
		p := e.newPair(dt, s, gen)
		return p.dev, p.ref, p
	}
	for _, dt := range all {
		for _, cdt := range all {
			if !dt.IsHalf() && !cdt.IsHalf() {
				continue
			}
			for _, sh := range whereShapes {
				// -0 is zero and NaN is not, in every float cond.
				cgen := func(i int) float64 { return []float64{0, 1, -2, math.Copysign(0, -1), 3, math.NaN()}[e.rng.IntN(6)] }
				if cdt == backend.Int32 {
					cgen = func(i int) float64 { return []float64{0, 1, -2, 0, 3}[e.rng.IntN(5)] }
				}
				cd, cr, _ := mk(cdt, sh.c, cgen)
				ad, ar, _ := mk(dt, sh.a, e.uniform(-100, 100))
				bd, br, _ := mk(dt, sh.b, e.uniform(-100, 100))
				dd, dr, dp := mk(dt, sh.dst, func(int) float64 { return 1 })
				e.dev.Where(dd, cd, ad, bd)
				e.ref.Where(dr, cr, ar, br)
				what := fmt.Sprintf("where %v cond %v %v", dt, cdt, sh.c)
				if !dt.IsHalf() {
					e.compare(what, dp, 0)
					continue
				}
				got := make([]uint16, dp.n)
				e.dev.Read(dd.Buf, got)
				want := make([]float32, dp.n)
				e.ref.Read(dr.Buf, want)
				for i := range got {
					if w := narrow16(dt, want[i]); got[i] != w {
						t.Errorf("%s: element %d: %#04x, want %#04x", what, i, got[i], w)
						break
					}
				}
			}
		}
	}
}

// TestOpsElementwiseSchedules runs the elementwise kernels (fill, copy
// with and without conversion, unary, unary_grad with y recomputed,
// binary with a broadcast operand, where with 32- and 16-bit conditions)
// on float32, float16 and bfloat16 under the emulator's forward, reverse
// and random thread schedules: the results must agree bit for bit.
func TestOpsElementwiseSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(11, 12))
	const r, c = 30, 100
	host := make([]float32, r*c)
	for i := range host {
		host[i] = float32(gen.NormFloat64())
	}
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		dev := e.dev
		v := contigView
		read := func(what string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, what)
		}
		x32 := dev.Alloc(backend.Float32, r*c)
		dev.Write(x32, host)
		for _, dt := range floatTypes {
			x, f := dev.Alloc(dt, r*c), dev.Alloc(dt, r*c)
			dev.Copy(v(x, 0, r*c), v(x32, 0, r*c))
			read(fmt.Sprintf("copy float32 → %v", dt), x, r*c)
			dev.Fill(v(f, 0, r*c), 0)
			dev.Fill(backend.View{Buf: f, Offset: 1, Shape: []int{r / 2, c}, Strides: []int{2 * c, 1}}, 1.0/3)
			read(fmt.Sprintf("fill %v", dt), f, r*c)
			xt := backend.View{Buf: x, Shape: []int{r, c}, Strides: []int{1, r}} // transposed
			y, dx, z, w := dev.Alloc(dt, r*c), dev.Alloc(dt, r*c), dev.Alloc(dt, r*c), dev.Alloc(dt, r*c)
			dev.Unary(backend.GELUTanh, backend.Scalars{}, v(y, 0, r, c), xt)
			read(fmt.Sprintf("unary %v gelu_tanh", dt), y, r*c)
			dev.UnaryGrad(backend.GELUTanh, backend.Scalars{}, v(dx, 0, r, c), xt, backend.View{}, v(x, 0, r, c))
			read(fmt.Sprintf("unary_grad %v gelu_tanh", dt), dx, r*c)
			dev.Binary(backend.Mul, v(z, 0, r, c), xt, backend.View{Buf: x, Offset: 7, Shape: []int{r, c}, Strides: []int{0, 1}})
			read(fmt.Sprintf("binary %v mul", dt), z, r*c)
			dev.Where(v(w, 0, r, c), v(x32, 0, r, c), v(y, 0, r, c), xt)
			read(fmt.Sprintf("where %v, float32 cond", dt), w, r*c)
			dev.Where(v(w, 0, r, c), v(z, 0, r, c), xt, v(y, 0, r, c))
			read(fmt.Sprintf("where %v, %v cond", dt, dt), w, r*c)
			if dt.IsHalf() {
				w32 := dev.Alloc(backend.Float32, r*c)
				dev.Where(v(w32, 0, r, c), v(z, 0, r, c), v(x32, 0, r, c), v(x32, 7, r, c))
				read(fmt.Sprintf("where float32, %v cond", dt), w32, r*c)
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsElementwiseRefused: float64 is refused with the backend's
// message (before any kernel: a Backend without a device), and dtype
// combinations no kernel takes (mixed 16-bit dtypes, a 16-bit output from
// float32 inputs, int32 arithmetic) panic naming the kernel.
func TestOpsElementwiseRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kFill:      func() { b.Fill(f64, 1) },
			kCopy:      func() { b.Copy(f64, f64) },
			kUnary:     func() { b.Unary(backend.Exp, backend.Scalars{}, f64, f64) },
			kBinary:    func() { b.Binary(backend.Add, f64, f64, f64) },
			kWhere:     func() { b.Where(f64, f64, f64, f64) },
			kUnaryGrad: func() { b.UnaryGrad(backend.Tanh, backend.Scalars{}, f64, f64, f64, f64) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(4), e.normal)
	f := e.newPair(backend.Float32, contig(4), e.normal)
	i := e.newPair(backend.Int32, contig(4), func(int) float64 { return 1 })
	for name, fn := range map[string]func(){
		"unary f16←f32":       func() { e.dev.Unary(backend.Exp, backend.Scalars{}, h.dev, f.dev) },
		"unary_grad mixed":    func() { e.dev.UnaryGrad(backend.Tanh, backend.Scalars{}, h.dev, h.dev, bf.dev, h.dev) },
		"binary f16 f16 bf16": func() { e.dev.Binary(backend.Add, h.dev, h.dev, bf.dev) },
		"binary int32":        func() { e.dev.Binary(backend.Add, i.dev, i.dev, i.dev) },
		"where f16←f32":       func() { e.dev.Where(h.dev, i.dev, f.dev, h.dev) },
	} {
		wantPanic(t, name, fn, "metal: ")
	}
}

// TestOpsElementwiseKernelNames checks that every kernel these ops launch
// is defined in the embedded sources (the Metal driver finds its file by
// name).
func TestOpsElementwiseKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{kFill, kCopy, kUnary, kUnaryGrad, kBinary, kWhere, kFill16, kCopyCvt, kWhere16, kWhereC16, kWhere16C16}
	for _, dt := range floatTypes {
		tag := dtypeTag(dt)
		names = append(names, kernels.Name("unary", tag), kernels.Name("unary", "grad", tag), kernels.Name("binary", tag))
	}
	for _, k := range names {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings of the elementwise kernels by dtype (go test -bench
// OpsElementwise -run '^$' ./metal): they measure the emulation, not a
// GPU.
func BenchmarkOpsElementwise(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0, shape...) }
	big, big2, big3 := up(1<<20), up(1<<20), up(1<<20)
	b.Run("binary_add_1M", func(b *testing.B) {
		for b.Loop() {
			dev.Binary(backend.Add, big3, big, big2)
			dev.Sync()
		}
	})
	const n = 1 << 20
	vec := func(dt backend.DType) backend.View {
		return backend.View{Buf: dev.Alloc(dt, n), Shape: []int{n}, Strides: []int{1}}
	}
	x32 := vec(backend.Float32)
	dev.Fill(x32, 0.5)
	for _, dt := range floatTypes {
		x, y, z := vec(dt), vec(dt), vec(dt)
		dev.Copy(x, x32)
		dev.Copy(y, x32)
		b.Run(fmt.Sprintf("binary_add_1M_%v", dt), func(b *testing.B) {
			for b.Loop() {
				dev.Binary(backend.Add, z, x, y)
				dev.Sync()
			}
		})
		if dt != backend.Float32 {
			b.Run(fmt.Sprintf("copy_1M_float32_to_%v", dt), func(b *testing.B) {
				for b.Loop() {
					dev.Copy(z, x32)
					dev.Sync()
				}
			})
		}
	}
}
