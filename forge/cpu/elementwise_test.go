package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// ---------------------------------------------------------------------------
// Test views: a backend buffer plus a float64 copy of it for the references.

// ewKind is how a test view lays its elements out in memory.
type ewKind int

const (
	ewContig  ewKind = iota // row-major, at an offset
	ewBcast                 // stride 0 on every dimension in the view's broadcast mask
	ewPerm                  // a transposed view of a contiguous buffer (dims reversed)
	ewGapped                // every stride doubled (a view of every other element)
	ewFlipped               // the first non-trivial dimension walked backwards
)

var ewKindNames = [...]string{"contig", "bcast", "perm", "gapped", "flipped"}

func (k ewKind) String() string { return ewKindNames[k] }

// ewTensor is a strided view with a host copy of its whole buffer.
type ewTensor struct {
	v    backend.View
	host []float64
}

// at returns the element at a multi-index.
func (t ewTensor) at(idx []int) float64 { return t.host[ewOffset(t.v, idx)] }

func ewOffset(v backend.View, idx []int) int {
	o := v.Offset
	for d, i := range idx {
		o += i * v.Strides[d]
	}
	return o
}

// ewRound rounds x to dt's precision.
func ewRound(dt backend.DType, x float64) float64 {
	switch dt {
	case backend.Float32:
		return float64(float32(x))
	case backend.Int32:
		return float64(int32(x))
	}
	return x
}

// ewMake builds a view of the given shape and kind filled by gen (values are
// rounded to dt). For ewBcast, dims with bcast[d] set get stride 0.
func ewMake(b *Backend, rng *rand.Rand, dt backend.DType, shape []int, kind ewKind, bcast []bool, gen func() float64) ewTensor {
	nd := len(shape)
	strides := make([]int, nd)
	// The physical shape: broadcast dims have extent 1.
	phys := append([]int(nil), shape...)
	if kind == ewBcast {
		for d := range phys {
			if d < len(bcast) && bcast[d] {
				phys[d] = 1
			}
		}
	}
	switch kind {
	case ewPerm:
		// Physical layout is the reversed shape, row-major.
		acc := 1
		for d := 0; d < nd; d++ {
			strides[d] = acc
			acc *= shape[d]
		}
	default:
		copy(strides, backend.ContiguousStrides(phys))
		if kind == ewGapped {
			for d := range strides {
				strides[d] *= 2
			}
		}
		if kind == ewBcast {
			for d := range strides {
				if phys[d] == 1 && shape[d] != 1 {
					strides[d] = 0
				}
			}
		}
	}
	n := 1
	for _, s := range phys {
		n *= s
	}
	if kind == ewGapped {
		n = 2*n + 1
	}
	off := rng.Intn(3)
	total := off + n
	offset := off
	if kind == ewFlipped {
		for d := range shape {
			if shape[d] > 1 {
				offset += (shape[d] - 1) * strides[d]
				strides[d] = -strides[d]
				break
			}
		}
	}
	host := make([]float64, max(total, 1))
	for i := range host {
		host[i] = ewRound(dt, gen())
	}
	buf := b.Alloc(dt, len(host))
	ewWrite(b, buf, host)
	return ewTensor{v: backend.View{Buf: buf, Offset: offset, Shape: append([]int(nil), shape...), Strides: strides}, host: host}
}

// ewWrite writes float64 values into buf, converted to its dtype (16-bit
// ones rounded once).
func ewWrite(b *Backend, buf backend.Buffer, host []float64) {
	switch buf.DType() {
	case backend.Float32:
		s := make([]float32, len(host))
		for i, v := range host {
			s[i] = float32(v)
		}
		b.Write(buf, s)
	case backend.Float64:
		b.Write(buf, host)
	case backend.Int32:
		s := make([]int32, len(host))
		for i, v := range host {
			s[i] = int32(v)
		}
		b.Write(buf, s)
	default:
		s := make([]uint16, len(host))
		for i, v := range host {
			s[i] = halfBits(buf.DType(), v)
		}
		b.Write(buf, s)
	}
}

// ewForIndex calls fn for every multi-index of shape in row-major order.
func ewForIndex(shape []int, fn func(idx []int)) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	idx := make([]int, len(shape))
	for k := 0; k < n; k++ {
		fn(idx)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// ewClose reports whether got matches want within rel (NaNs match NaNs,
// infinities must be equal).
func ewClose(got, want, rel, abs float64) bool {
	if math.IsNaN(want) || math.IsNaN(got) {
		return math.IsNaN(want) && math.IsNaN(got)
	}
	if math.IsInf(want, 0) || math.IsInf(got, 0) {
		return got == want
	}
	return math.Abs(got-want) <= rel*math.Abs(want)+abs
}

// ewCheckDst compares every element of dst (read back) against ref(idx),
// and checks that elements of dst's buffer outside the view are untouched.
func ewCheckDst(t *testing.T, b *Backend, name string, dst ewTensor, ref func(idx []int) float64, rel, abs float64) {
	t.Helper()
	got := readAll(b, dst.v.Buf)
	inView := make([]bool, len(got))
	bad, worst := 0, 0.0
	ewForIndex(dst.v.Shape, func(idx []int) {
		o := ewOffset(dst.v, idx)
		inView[o] = true
		want := ewRound(dst.v.DType(), ref(idx))
		if !ewClose(got[o], want, rel, abs) {
			if bad < 3 {
				t.Errorf("%s: at %v got %v want %v", name, idx, got[o], want)
			}
			bad++
		} else if d := math.Abs(got[o] - want); d > worst && !math.IsInf(want, 0) {
			worst = d
		}
	})
	for i, v := range got {
		if !inView[i] && v != dst.host[i] && !(math.IsNaN(v) && math.IsNaN(dst.host[i])) {
			t.Errorf("%s: element %d outside the view changed: %v -> %v", name, i, dst.host[i], v)
			break
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements wrong", name, bad, len(dst.host))
	}
}

// ewTol is the relative tolerance of results computed in float64 and
// rounded to dt.
func ewTol(dt backend.DType) float64 {
	if dt == backend.Float32 {
		return 2e-7
	}
	return 1e-12
}

// ewShapes are the shapes the elementwise tests run on; the last two take
// the parallel path (with 3 workers, chunks cut runs at odd places).
var ewShapes = [][]int{
	{}, {0}, {1}, {7}, {33}, {1000}, {3, 1, 5}, {2, 0, 3}, {1, 7}, {4, 7, 33}, {2, 3, 4, 5}, {33, 1000}, {100003},
}

// ewBcastMask broadcasts every other dimension (starting with the first
// non-trivial one), or the only dimension.
func ewBcastMask(shape []int, phase int) []bool {
	m := make([]bool, len(shape))
	for d := range shape {
		m[d] = (d+phase)%2 == 0
	}
	return m
}

func ewBackend(workers int) *Backend {
	b := &Backend{workers: workers}
	b.BackendName = "cpu"
	return b
}

var ewDTypes = []backend.DType{backend.Float32, backend.Float64}

// ---------------------------------------------------------------------------
// Unary

type ewUnaryCase struct {
	op   backend.UnaryOp
	s    backend.Scalars
	lo   float64 // input range [lo, hi); a negative lo with posOnly false
	hi   float64
	sign bool // random sign on [lo, hi)
}

func ewUnaryCases() []ewUnaryCase {
	c := []ewUnaryCase{
		{op: backend.Neg, lo: -4, hi: 4},
		{op: backend.Exp, lo: -10, hi: 10},
		{op: backend.Exp, lo: -110, hi: 95}, // float32 underflow, denormals, overflow
		{op: backend.Log, lo: 0.01, hi: 50},
		{op: backend.Sqrt, lo: 0, hi: 50},
		{op: backend.Rsqrt, lo: 0.01, hi: 50},
		{op: backend.Tanh, lo: -5, hi: 5},
		{op: backend.Tanh, lo: -0.1, hi: 0.1}, // the float32 series near 0
		{op: backend.Sigmoid, lo: -12, hi: 12},
		{op: backend.SiLU, lo: -12, hi: 12},
		// The textbook references cancel in float64 below about −3.5 (the
		// special-value test covers the tails).
		{op: backend.GELUTanh, lo: -3.5, hi: 6},
		{op: backend.GELUErf, lo: -3.5, hi: 6},
		{op: backend.ReLU, lo: -4, hi: 4},
		{op: backend.Abs, lo: -4, hi: 4},
		{op: backend.Clamp, s: backend.Scalars{A: -1, B: 0.5}, lo: -3, hi: 3},
		{op: backend.Affine, s: backend.Scalars{A: 1.5, B: -0.25}, lo: -4, hi: 4},
		{op: backend.Affine, s: backend.Scalars{A: 1.0 / 3, B: 0}, lo: -4, hi: 4},
		{op: backend.RPowScalar, s: backend.Scalars{A: 1.7}, lo: -5, hi: 5},
		{op: backend.RPowScalar, s: backend.Scalars{A: 0.3}, lo: -5, hi: 5},
		{op: backend.RDivScalar, s: backend.Scalars{A: -2.5}, lo: 0.2, hi: 4, sign: true},
		{op: backend.Square, lo: -4, hi: 4},
		{op: backend.Sign, lo: -4, hi: 4},
	}
	for _, a := range []float64{0, 1, 2, 3, -1, 0.5, -0.5, 2.5, -1.5} {
		lo, sign := 0.05, true
		if a != math.Trunc(a) {
			sign = false // non-integer powers of negatives are NaN
		}
		c = append(c, ewUnaryCase{op: backend.PowScalar, s: backend.Scalars{A: a}, lo: lo, hi: 3, sign: sign})
	}
	return c
}

func (c ewUnaryCase) gen(rng *rand.Rand) func() float64 {
	return func() float64 {
		v := c.lo + (c.hi-c.lo)*rng.Float64()
		if c.sign && rng.Intn(2) == 0 {
			v = -v
		}
		return v
	}
}

// ewUnaryRef is the float64 reference of every unary op, written in the
// textbook form (independent of the kernel's formulations).
func ewUnaryRef(op backend.UnaryOp, s backend.Scalars, x float64) float64 {
	switch op {
	case backend.Neg:
		return -x
	case backend.Exp:
		return math.Exp(x)
	case backend.Log:
		return math.Log(x)
	case backend.Sqrt:
		return math.Sqrt(x)
	case backend.Rsqrt:
		return math.Pow(x, -0.5)
	case backend.Tanh:
		return math.Tanh(x)
	case backend.Sigmoid:
		return 1 / (1 + math.Exp(-x))
	case backend.SiLU:
		return x / (1 + math.Exp(-x))
	case backend.GELUTanh:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case backend.GELUErf:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case backend.ReLU:
		return math.Max(x, 0)
	case backend.Abs:
		return math.Abs(x)
	case backend.PowScalar:
		return math.Pow(x, s.A)
	case backend.Clamp:
		return math.Min(math.Max(x, s.A), s.B)
	case backend.Affine:
		return s.A*x + s.B
	case backend.RPowScalar:
		return math.Pow(s.A, x)
	case backend.RDivScalar:
		return s.A / x
	case backend.Square:
		return x * x
	case backend.Sign:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	}
	panic(op)
}

// ewLayouts are the (dst, src) kinds the elementwise tests combine.
var ewUnaryLayouts = [][2]ewKind{
	{ewContig, ewContig}, {ewContig, ewBcast}, {ewContig, ewPerm}, {ewPerm, ewContig},
	{ewGapped, ewGapped}, {ewContig, ewFlipped}, {ewGapped, ewBcast},
}

func TestUnaryMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	b := ewBackend(3)
	for _, dt := range ewDTypes {
		for _, c := range ewUnaryCases() {
			for si, shape := range ewShapes {
				for li, lk := range ewUnaryLayouts {
					// Cover every layout on small shapes, rotate on big ones.
					if len(shape) > 0 && shape[0] >= 33 && li%3 != si%3 {
						continue
					}
					name := fmt.Sprintf("%v/%v%+v/%v/%v<-%v", dt, c.op, c.s, shape, lk[0], lk[1])
					src := ewMake(b, rng, dt, shape, lk[1], ewBcastMask(shape, si), c.gen(rng))
					dst := ewMake(b, rng, dt, shape, lk[0], nil, func() float64 { return -7 })
					b.Unary(c.op, c.s, dst.v, src.v)
					rel := ewTol(dt)
					if dt == backend.Float64 && (c.op == backend.GELUTanh || c.op == backend.GELUErf) {
						rel = 1e-10 // the textbook 1+tanh/1+erf forms cancel for x < 0
					}
					ewCheckDst(t, b, name, dst, func(idx []int) float64 {
						return ewUnaryRef(c.op, c.s, src.at(idx))
					}, rel, 1e-300)
				}
			}
		}
	}
}

// TestUnarySpecialValues pins the behaviour at NaN, ±0, ±Inf and extreme
// inputs to PyTorch's (values observed with torch 1.13).
func TestUnarySpecialValues(t *testing.T) {
	b := ewBackend(1)
	nan, inf := math.NaN(), math.Inf(1)
	negZero := math.Copysign(0, -1)
	cases := []struct {
		op     backend.UnaryOp
		s      backend.Scalars
		in     []float64
		want   []float64
		signed bool // also compare the sign bit of zeros
	}{
		{op: backend.Sign, in: []float64{nan, negZero, 0, -2, 3}, want: []float64{0, 0, 0, -1, 1}},
		{op: backend.ReLU, in: []float64{nan, negZero, 0, -2, 3}, want: []float64{nan, negZero, 0, 0, 3}, signed: true},
		{op: backend.Abs, in: []float64{negZero, -inf, nan}, want: []float64{0, inf, nan}, signed: true},
		{op: backend.Clamp, s: backend.Scalars{A: 2, B: 1}, in: []float64{-5, 0, 5, nan}, want: []float64{1, 1, 1, nan}},
		{op: backend.Clamp, s: backend.Scalars{A: -1, B: 1}, in: []float64{-inf, inf, nan}, want: []float64{-1, 1, nan}},
		{op: backend.PowScalar, s: backend.Scalars{A: 0}, in: []float64{nan, 0, -3}, want: []float64{1, 1, 1}},
		{op: backend.PowScalar, s: backend.Scalars{A: -1}, in: []float64{-8, 0, negZero}, want: []float64{-0.125, inf, -inf}},
		{op: backend.PowScalar, s: backend.Scalars{A: 0.5}, in: []float64{-inf, negZero, 4}, want: []float64{inf, 0, 2}, signed: true},
		{op: backend.Rsqrt, in: []float64{0, negZero, -1}, want: []float64{inf, -inf, nan}},
		{op: backend.Sigmoid, in: []float64{-1000, 1000, nan}, want: []float64{0, 1, nan}},
		{op: backend.SiLU, in: []float64{-1000, 1000, nan}, want: []float64{negZero, 1000, nan}, signed: true},
		{op: backend.GELUTanh, in: []float64{-1000, 1000, -1e300, 1e300}, want: []float64{negZero, 1000, negZero, 1e300}, signed: true},
		{op: backend.GELUErf, in: []float64{-1000, 1000, negZero}, want: []float64{negZero, 1000, negZero}, signed: true},
		{op: backend.Exp, in: []float64{-inf, inf, 1000, nan, negZero}, want: []float64{0, inf, inf, nan, 1}},
		{op: backend.Tanh, in: []float64{-inf, inf, negZero, nan, 1e-5, -1e-30, 20, -20}, want: []float64{-1, 1, negZero, nan, math.Tanh(1e-5), -1e-30, 1, -1}, signed: true},
		{op: backend.Sigmoid, in: []float64{-inf, inf, negZero}, want: []float64{0, 1, 0.5}},
		{op: backend.SiLU, in: []float64{-inf, inf}, want: []float64{nan, inf}},
		{op: backend.Log, in: []float64{0, -1, inf}, want: []float64{-inf, nan, inf}},
	}
	for _, dt := range ewDTypes {
		for _, c := range cases {
			n := len(c.in)
			src := ewTensor{v: backend.View{Buf: b.Alloc(dt, n), Shape: []int{n}, Strides: []int{1}}}
			ewWrite(b, src.v.Buf, c.in)
			dst := backend.View{Buf: b.Alloc(dt, n), Shape: []int{n}, Strides: []int{1}}
			b.Unary(c.op, c.s, dst, src.v)
			got := readAll(b, dst.Buf)
			for i := range got {
				want := ewRound(dt, c.want[i])
				if dt == backend.Float32 && math.Abs(c.in[i]) > math.MaxFloat32 && !math.IsInf(c.in[i], 0) {
					continue // 1e300 does not fit float32
				}
				if !ewClose(got[i], want, 0, 0) || (c.signed && math.Signbit(got[i]) != math.Signbit(want)) {
					t.Errorf("%v %v(%v) = %v, want %v", dt, c.op, c.in[i], got[i], want)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// UnaryGrad

// ewGradRef is dx for g = 1: the derivative in textbook form, using x only
// except where the kernel's documented rule uses y (then the same y is
// passed to both, so float32 rounding of y does not count as error).
func ewGradRef(op backend.UnaryOp, s backend.Scalars, x, y float64) float64 {
	switch op {
	case backend.Neg:
		return -1
	case backend.Exp:
		return y
	case backend.Log:
		return 1 / x
	case backend.Sqrt:
		return 0.5 / y
	case backend.Rsqrt:
		return -0.5 * y * y * y
	case backend.Tanh:
		return 1 - y*y
	case backend.Sigmoid:
		return y * (1 - y)
	case backend.SiLU:
		sg := 1 / (1 + math.Exp(-x))
		return sg + x*sg*(1-sg)
	case backend.GELUTanh:
		k := math.Sqrt(2 / math.Pi)
		th := math.Tanh(k * (x + 0.044715*x*x*x))
		return 0.5*(1+th) + 0.5*x*(1-th*th)*k*(1+3*0.044715*x*x)
	case backend.GELUErf:
		return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
	case backend.ReLU:
		if x > 0 {
			return 1
		}
		return 0
	case backend.Abs:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	case backend.PowScalar:
		if s.A == 0 {
			return 0
		}
		return s.A * math.Pow(x, s.A-1)
	case backend.Clamp:
		if s.A <= x && x <= s.B {
			return 1
		}
		return 0
	case backend.Affine:
		return s.A
	case backend.RPowScalar:
		return y * math.Log(s.A)
	case backend.RDivScalar:
		return -s.A / (x * x)
	case backend.Square:
		return 2 * x
	case backend.Sign:
		return 0
	}
	panic(op)
}

func TestUnaryGradMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	b := ewBackend(3)
	layouts := [][4]ewKind{ // dx, x, y, g
		{ewContig, ewContig, ewContig, ewContig},
		{ewContig, ewPerm, ewPerm, ewBcast},
		{ewGapped, ewContig, ewGapped, ewContig},
		{ewPerm, ewFlipped, ewFlipped, ewContig},
	}
	for _, dt := range ewDTypes {
		for _, c := range ewUnaryCases() {
			for si, shape := range ewShapes {
				for li, lk := range layouts {
					big := len(shape) > 0 && shape[0] >= 33
					if big && li != (si+int(c.op))%len(layouts) {
						continue
					}
					for _, nilY := range []bool{false, true} {
						if nilY && li != si%len(layouts) {
							continue
						}
						name := fmt.Sprintf("%v/%v%+v/%v/%v nilY=%v", dt, c.op, c.s, shape, lk, nilY)
						x := ewMake(b, rng, dt, shape, lk[1], nil, c.gen(rng))
						// y is op(x) rounded to dt, laid out like the x it came from.
						y := ewMake(b, rng, dt, shape, lk[2], nil, func() float64 { return 0 })
						ewForIndex(shape, func(idx []int) {
							y.host[ewOffset(y.v, idx)] = ewRound(dt, ewUnaryRef(c.op, c.s, x.at(idx)))
						})
						ewWrite(b, y.v.Buf, y.host)
						g := ewMake(b, rng, dt, shape, lk[3], ewBcastMask(shape, 1), func() float64 { return 4*rng.Float64() - 2 })
						dx := ewMake(b, rng, dt, shape, lk[0], nil, func() float64 { return -7 })
						yv := y.v
						if nilY {
							yv = backend.View{}
						}
						b.UnaryGrad(c.op, c.s, dx.v, x.v, yv, g.v)
						rel := 4 * ewTol(dt)
						if dt == backend.Float64 && (c.op == backend.GELUTanh || c.op == backend.GELUErf) {
							rel = 1e-9
						}
						// Near a root of the derivative (SiLU's at x ≈ −1.28) the
						// two formulations differ relatively: allow 1e-13 absolute.
						ewCheckDst(t, b, name, dx, func(idx []int) float64 {
							return g.at(idx) * ewGradRef(c.op, c.s, x.at(idx), y.at(idx))
						}, rel, 1e-13)
					}
				}
			}
		}
	}
}

// TestUnaryGradFiniteDifference checks every derivative against a central
// difference of the forward kernel in float64.
func TestUnaryGradFiniteDifference(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	b := ewBackend(1)
	const n = 200
	for _, c := range ewUnaryCases() {
		xs := make([]float64, 0, n)
		for len(xs) < n {
			v := c.gen(rng)()
			// Stay away from kinks, where the derivative is a convention.
			if math.Abs(v) < 1e-3 || (c.op == backend.Clamp && (math.Abs(v-c.s.A) < 1e-3 || math.Abs(v-c.s.B) < 1e-3)) {
				continue
			}
			xs = append(xs, v)
		}
		vec := func(v []float64) backend.View {
			buf := b.Alloc(backend.Float64, len(v))
			b.Write(buf, v)
			return backend.View{Buf: buf, Shape: []int{len(v)}, Strides: []int{1}}
		}
		f := func(x []float64) []float64 {
			out := vec(make([]float64, n))
			b.Unary(c.op, c.s, out, vec(x))
			return readAll(b, out.Buf)
		}
		y := f(xs)
		ones := make([]float64, n)
		for i := range ones {
			ones[i] = 1
		}
		dxv := vec(make([]float64, n))
		b.UnaryGrad(c.op, c.s, dxv, vec(xs), vec(y), vec(ones))
		dx := readAll(b, dxv.Buf)
		hs := make([]float64, n)
		xp, xm := make([]float64, n), make([]float64, n)
		for i, v := range xs {
			hs[i] = 1e-6 * max(1, math.Abs(v))
			xp[i], xm[i] = v+hs[i], v-hs[i]
		}
		fp, fm := f(xp), f(xm)
		for i := range xs {
			fd := (fp[i] - fm[i]) / (2 * hs[i])
			if !ewClose(dx[i], fd, 1e-6, 1e-6) {
				t.Errorf("%v%+v: d/dx at %v = %v, finite difference %v", c.op, c.s, xs[i], dx[i], fd)
				break
			}
		}
	}
}

// TestUnaryGradSpecialValues pins the derivative conventions at kinks and
// special points to PyTorch's (observed with torch 1.13).
func TestUnaryGradSpecialValues(t *testing.T) {
	b := ewBackend(1)
	nan, inf := math.NaN(), math.Inf(1)
	xs := []float64{0, -1, 1, 2, nan}
	cases := []struct {
		op   backend.UnaryOp
		s    backend.Scalars
		want []float64
	}{
		{backend.Abs, backend.Scalars{}, []float64{0, -1, 1, 1, 0}},
		{backend.Clamp, backend.Scalars{A: -1, B: 1}, []float64{1, 1, 1, 0, 0}},
		{backend.ReLU, backend.Scalars{}, []float64{0, 0, 1, 1, 1}},
		{backend.PowScalar, backend.Scalars{A: 0}, []float64{0, 0, 0, 0, 0}},
		{backend.PowScalar, backend.Scalars{A: 2}, []float64{0, -2, 2, 4, nan}},
		{backend.PowScalar, backend.Scalars{A: 0.5}, []float64{inf, nan, 0.5, 0.5 / math.Sqrt2, nan}},
		{backend.RPowScalar, backend.Scalars{A: 0}, []float64{0, -inf, 0, 0, nan}},
		{backend.RPowScalar, backend.Scalars{A: 2}, []float64{math.Ln2, math.Ln2 / 2, 2 * math.Ln2, 4 * math.Ln2, nan}},
		{backend.Sign, backend.Scalars{}, []float64{0, 0, 0, 0, 0}},
		{backend.Sqrt, backend.Scalars{}, []float64{inf, nan, 0.5, 0.5 / math.Sqrt2, nan}},
		{backend.Rsqrt, backend.Scalars{}, []float64{-inf, nan, -0.5, -0.5 / math.Pow(2, 1.5), nan}},
		{backend.RDivScalar, backend.Scalars{A: 2}, []float64{-inf, -2, -2, -0.5, nan}},
		{backend.Log, backend.Scalars{}, []float64{inf, -1, 1, 0.5, nan}},
	}
	for _, dt := range ewDTypes {
		for _, c := range cases {
			n := len(xs)
			mk := func(v []float64) backend.View {
				buf := b.Alloc(dt, n)
				ewWrite(b, buf, v)
				return backend.View{Buf: buf, Shape: []int{n}, Strides: []int{1}}
			}
			x := mk(xs)
			y := mk(make([]float64, n))
			b.Unary(c.op, c.s, y, x)
			dx := mk(make([]float64, n))
			b.UnaryGrad(c.op, c.s, dx, x, y, mk([]float64{1, 1, 1, 1, 1}))
			got := readAll(b, dx.Buf)
			for i := range got {
				if !ewClose(got[i], ewRound(dt, c.want[i]), 1e-6, 0) {
					t.Errorf("%v %v%+v: grad at %v = %v, want %v", dt, c.op, c.s, xs[i], got[i], c.want[i])
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Binary

func ewBinaryRef(op backend.BinaryOp, a, b float64) float64 {
	cmp := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case backend.Add:
		return a + b
	case backend.Sub:
		return a - b
	case backend.Mul:
		return a * b
	case backend.Div:
		return a / b
	case backend.Pow:
		return math.Pow(a, b)
	case backend.Maximum:
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.NaN()
		}
		return math.Max(a, b)
	case backend.Minimum:
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.NaN()
		}
		return math.Min(a, b)
	case backend.Eq:
		return cmp(a == b)
	case backend.Ne:
		return cmp(a != b)
	case backend.Lt:
		return cmp(a < b)
	case backend.Le:
		return cmp(a <= b)
	case backend.Gt:
		return cmp(a > b)
	case backend.Ge:
		return cmp(a >= b)
	}
	panic(op)
}

func TestBinaryMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	b := ewBackend(3)
	// (dst, a, b) kinds: contiguous, row/column broadcasts both ways (the
	// scalar-operand fast paths), transposes, gaps and flips.
	layouts := [][3]ewKind{
		{ewContig, ewContig, ewContig},
		{ewContig, ewContig, ewBcast},
		{ewContig, ewBcast, ewContig},
		{ewContig, ewBcast, ewBcast},
		{ewContig, ewPerm, ewContig},
		{ewPerm, ewContig, ewBcast},
		{ewGapped, ewBcast, ewGapped},
		{ewContig, ewFlipped, ewPerm},
	}
	// Small integers make equal operands common, so == and ≤ are tested.
	gen := func() float64 {
		if rng.Intn(3) == 0 {
			return float64(rng.Intn(5) - 2)
		}
		return 6*rng.Float64() - 3
	}
	for _, dt := range ewDTypes {
		for op := backend.Add; op < backend.NumBinaryOps; op++ {
			ga, gb := gen, gen
			if op == backend.Pow {
				ga = func() float64 { return 0.1 + 3*rng.Float64() }
			}
			for si, shape := range ewShapes {
				for li, lk := range layouts {
					if len(shape) > 0 && shape[0] >= 33 && li%3 != si%3 {
						continue
					}
					for phase := 0; phase < 2; phase++ {
						name := fmt.Sprintf("%v/%v/%v/%v phase %d", dt, op, shape, lk, phase)
						a := ewMake(b, rng, dt, shape, lk[1], ewBcastMask(shape, phase), ga)
						c := ewMake(b, rng, dt, shape, lk[2], ewBcastMask(shape, phase+1), gb)
						dst := ewMake(b, rng, dt, shape, lk[0], nil, func() float64 { return -7 })
						b.Binary(op, dst.v, a.v, c.v)
						ewCheckDst(t, b, name, dst, func(idx []int) float64 {
							return ewBinaryRef(op, a.at(idx), c.at(idx))
						}, ewTol(dt), 1e-300)
					}
				}
			}
		}
	}
}

// TestBinaryScalarOperands runs every op with a scalar on either side
// (stride 0 over the whole run), including NaN, so the mirrored
// comparisons of the scalar-vector path and NaN propagation are checked.
func TestBinaryScalarOperands(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	b := ewBackend(1)
	n := 37
	for _, dt := range ewDTypes {
		for _, sc := range []float64{0.5, 1, 2, 3, -1, 0, math.NaN(), math.Inf(-1)} {
			vec := make([]float64, n)
			for i := range vec {
				vec[i] = ewRound(dt, float64(rng.Intn(7)-3)*0.5)
			}
			vec[0] = math.NaN()
			mk := func(v []float64, stride int) backend.View {
				buf := b.Alloc(dt, len(v))
				ewWrite(b, buf, v)
				return backend.View{Buf: buf, Shape: []int{n}, Strides: []int{stride}}
			}
			for op := backend.Add; op < backend.NumBinaryOps; op++ {
				for side := 0; side < 2; side++ {
					va, vb := mk(vec, 1), mk([]float64{sc}, 0)
					if side == 1 {
						va, vb = vb, va
					}
					dst := mk(make([]float64, n), 1)
					b.Binary(op, dst, va, vb)
					got := readAll(b, dst.Buf)
					for i := range got {
						x, y := vec[i], sc
						if side == 1 {
							x, y = y, x
						}
						want := ewRound(dt, ewBinaryRef(op, x, y))
						if !ewClose(got[i], want, ewTol(dt), 1e-300) {
							t.Errorf("%v %v(%v, %v) = %v, want %v", dt, op, x, y, got[i], want)
						}
					}
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Where

func TestWhereMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	b := ewBackend(3)
	layouts := [][4]ewKind{ // dst, cond, a, b
		{ewContig, ewContig, ewContig, ewContig},
		{ewContig, ewContig, ewBcast, ewContig}, // masked fill
		{ewContig, ewContig, ewContig, ewBcast},
		{ewContig, ewBcast, ewPerm, ewContig},
		{ewGapped, ewPerm, ewContig, ewFlipped},
	}
	dts := []backend.DType{backend.Float32, backend.Float64, backend.Int32}
	for _, dt := range dts {
		for _, ct := range dts {
			for si, shape := range ewShapes {
				for li, lk := range layouts {
					if len(shape) > 0 && shape[0] >= 33 && li%2 != si%2 {
						continue
					}
					name := fmt.Sprintf("%v/cond %v/%v/%v", dt, ct, shape, lk)
					cond := ewMake(b, rng, ct, shape, lk[1], ewBcastMask(shape, 1), func() float64 {
						switch rng.Intn(4) {
						case 0:
							return 0
						case 1:
							return math.Copysign(0, -1)
						case 2:
							return 0.25 // nonzero as float, zero as int32
						}
						return float64(rng.Intn(3) - 1)
					})
					a := ewMake(b, rng, dt, shape, lk[2], ewBcastMask(shape, 0), func() float64 { return float64(rng.Intn(1000)) })
					c := ewMake(b, rng, dt, shape, lk[3], ewBcastMask(shape, 0), func() float64 { return -float64(rng.Intn(1000)) - 1 })
					dst := ewMake(b, rng, dt, shape, lk[0], nil, func() float64 { return 7777 })
					b.Where(dst.v, cond.v, a.v, c.v)
					ewCheckDst(t, b, name, dst, func(idx []int) float64 {
						if cond.at(idx) != 0 {
							return a.at(idx)
						}
						return c.at(idx)
					}, 0, 0)
				}
			}
		}
	}
}

// TestElementwiseWorkersAgree checks that the result does not depend on how
// the work is split (1 worker vs 2, 3 and 5; 5 cuts runs at odd places).
func TestElementwiseWorkersAgree(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	shape := []int{3, 70001}
	gen := func() float64 { return 4*rng.Float64() - 2 }
	ref := ewBackend(1)
	a := ewMake(ref, rng, backend.Float32, shape, ewPerm, nil, gen)
	c := ewMake(ref, rng, backend.Float32, shape, ewBcast, []bool{false, true}, gen)
	run := func(b *Backend) []float64 {
		dst := ewMake(b, rand.New(rand.NewSource(8)), backend.Float32, shape, ewGapped, nil, func() float64 { return 0 })
		b.Binary(backend.Mul, dst.v, a.v, c.v)
		b.Unary(backend.GELUTanh, backend.Scalars{}, dst.v, dst.v)
		return readAll(b, dst.v.Buf)
	}
	want := run(ref)
	for _, w := range []int{2, 3, 5} {
		got := run(ewBackend(w))
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("workers=%d: element %d = %v, want %v", w, i, got[i], want[i])
			}
		}
	}
}

// TestElementwiseBadDType checks the panics name the kernel and dtype.
func TestElementwiseBadDType(t *testing.T) {
	b := ewBackend(1)
	iv := backend.View{Buf: b.Alloc(backend.Int32, 4), Shape: []int{4}, Strides: []int{1}}
	fv := backend.View{Buf: b.Alloc(backend.Float32, 4), Shape: []int{4}, Strides: []int{1}}
	for name, f := range map[string]func(){
		"unary":  func() { b.Unary(backend.Exp, backend.Scalars{}, iv, iv) },
		"binary": func() { b.Binary(backend.Add, fv, fv, iv) },
		"where":  func() { b.Where(fv, fv, iv, fv) },
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); len(s) == 0 || s[:5] != "cpu: " {
					t.Errorf("%s: panic %v, want a cpu: message", name, r)
				}
			}()
			f()
		}()
	}
}

// ---------------------------------------------------------------------------
// Benchmarks

func ewBenchVec(b *Backend, dt backend.DType, shape []int, strides []int) backend.View {
	n := 1
	for i, d := range shape {
		if strides[i] != 0 {
			n *= d
		}
	}
	buf := b.Alloc(dt, n)
	host := make([]float64, n)
	for i := range host {
		host[i] = 0.5 + float64(i%1000)/1000
	}
	ewWrite(b, buf, host)
	return backend.View{Buf: buf, Shape: shape, Strides: strides}
}

func BenchmarkBinaryAdd(bb *testing.B) {
	b := New()
	const n = 4 << 20
	for _, c := range []struct {
		name     string
		shape    []int
		as, bs   []int
		touchedB int
	}{
		{"contig_4M", []int{n}, []int{1}, []int{1}, 3},
		{"scalar_4M", []int{n}, []int{1}, []int{0}, 2},
		{"bias_4096x1024", []int{4096, 1024}, []int{1024, 1}, []int{0, 1}, 2},
	} {
		bb.Run(c.name, func(bb *testing.B) {
			x := ewBenchVec(b, backend.Float32, c.shape, c.as)
			y := ewBenchVec(b, backend.Float32, c.shape, c.bs)
			d := ewBenchVec(b, backend.Float32, c.shape, backend.ContiguousStrides(c.shape))
			bb.SetBytes(int64(c.touchedB * 4 * n))
			for bb.Loop() {
				b.Binary(backend.Add, d, x, y)
			}
		})
	}
}

func BenchmarkUnary(bb *testing.B) {
	b := New()
	const n = 4 << 20
	for _, op := range []backend.UnaryOp{backend.Affine, backend.Exp, backend.GELUTanh, backend.SiLU} {
		bb.Run(op.String()+"_4M", func(bb *testing.B) {
			x := ewBenchVec(b, backend.Float32, []int{n}, []int{1})
			d := ewBenchVec(b, backend.Float32, []int{n}, []int{1})
			bb.SetBytes(2 * 4 * n)
			for bb.Loop() {
				b.Unary(op, backend.Scalars{A: 2, B: 1}, d, x)
			}
		})
	}
}
