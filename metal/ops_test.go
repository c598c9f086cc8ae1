package metal

// The ops against the CPU backend on the emulator ("metal-emu"): every op,
// on sizes that hit the kernels' edge paths (odd sizes, strided and
// broadcast views, offsets, more dims than the kernels index, transposed
// matmul operands, batches with broadcast, accumulation).

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// opsTol is the tolerance of the comparisons: |got − want| ≤ tol·max(1, |want|),
// the conformance suite's float32 tolerance.
const opsTol = 1e-5

// opsEnv is the device under test and the CPU reference.
type opsEnv struct {
	t   *testing.T
	dev *Backend
	ref *cpu.Backend
	rng *rand.Rand
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	return &opsEnv{t: t, dev: opsDevice(t), ref: cpu.New(), rng: rand.New(rand.NewPCG(1, 2))}
}

var (
	opsDevOnce sync.Once
	opsDev     *Backend
	opsDevErr  error
)

// testDevice is the device the package's kernel tests run on: the GPU
// when FORGE_BACKEND=metal (make test-metal on a Mac), else the emulator.
// Tests of the emulator's thread schedules skip, saying so, on the GPU.
func testDevice() string {
	if os.Getenv("FORGE_BACKEND") == "metal" {
		return "metal"
	}
	return "metal-emu"
}

// opsDevice returns the device the op tests share (testDevice): one
// backend for the package's tests (the emulator's compile is cached
// across runs).
func opsDevice(t *testing.T) *Backend {
	t.Helper()
	opsDevOnce.Do(func() {
		b, err := backend.Open(testDevice())
		if err != nil {
			opsDevErr = err
			return
		}
		opsDev = b.(*Backend)
	})
	if opsDevErr != nil {
		skipUnavailable(t, opsDevErr)
	}
	return opsDev
}

// skipUnavailable skips t when err says the test device cannot run here
// (the emulator on a machine without clang, say) and fails it otherwise:
// a kernel file that does not compile must fail the tests, not skip them.
func skipUnavailable(t testing.TB, err error) {
	t.Helper()
	if testDevice() != "metal" && errors.Is(err, emu.ErrUnavailable) {
		t.Skipf("%s is not available here: %v", testDevice(), err)
	}
	t.Fatalf("%s: %v", testDevice(), err)
}

// openTestDevice opens testDevice as a forge device (see skipUnavailable).
func openTestDevice(t testing.TB) *forge.Device {
	t.Helper()
	dev, err := forge.OpenDevice(testDevice())
	if err != nil {
		skipUnavailable(t, err)
	}
	return dev
}

// vspec is a view: shape, strides and offset (strides nil: contiguous).
type vspec struct {
	shape, strides []int
	off            int
}

func contig(shape ...int) vspec { return vspec{shape: shape} }

func (s vspec) full() vspec {
	if s.strides == nil {
		s.strides = backend.ContiguousStrides(s.shape)
	}
	return s
}

// extent is the number of elements a buffer needs to hold the view.
func (s vspec) extent() int {
	s = s.full()
	n := s.off + 1
	for d, k := range s.shape {
		if k == 0 {
			return s.off
		}
		n += (k - 1) * s.strides[d]
	}
	return n
}

// pair is one tensor on both devices (identical contents).
type pair struct {
	dev, ref backend.View
	dt       backend.DType
	n        int
}

// newPair allocates a buffer for spec on both devices filled with gen(i)
// (rounded once for a 16-bit dt).
func (e *opsEnv) newPair(dt backend.DType, s vspec, gen func(i int) float64) pair {
	s = s.full()
	n := max(s.extent(), 1)
	db, rb := e.dev.Alloc(dt, n), e.ref.Alloc(dt, n)
	var h any
	switch dt {
	case backend.Float32:
		h = hostValues[float32](n, gen)
	case backend.Int32:
		h = hostValues[int32](n, gen)
	case backend.Float16, backend.BFloat16:
		h = narrowAll(dt, hostValues[float32](n, gen))
	}
	if h != nil {
		e.dev.Write(db, h)
		e.ref.Write(rb, h)
	}
	return pair{
		dev: backend.View{Buf: db, Offset: s.off, Shape: s.shape, Strides: s.strides},
		ref: backend.View{Buf: rb, Offset: s.off, Shape: s.shape, Strides: s.strides},
		dt:  dt, n: n,
	}
}

// hostValues is gen(0), …, gen(n−1) converted to T.
func hostValues[T float32 | int32](n int, gen func(i int) float64) []T {
	h := make([]T, n)
	for i := range h {
		h[i] = T(gen(i))
	}
	return h
}

func (e *opsEnv) normal(int) float64 { return e.rng.NormFloat64() }
func (e *opsEnv) uniform(lo, hi float64) func(int) float64 {
	return func(int) float64 { return lo + (hi-lo)*e.rng.Float64() }
}

// read returns both devices' whole buffers as float64.
func (e *opsEnv) read(p pair) (got, want []float64) {
	get := func(be backend.Backend, b backend.Buffer) []float64 {
		out := make([]float64, p.n)
		if p.dt == backend.Int32 {
			h := make([]int32, p.n)
			be.Read(b, h)
			for i, v := range h {
				out[i] = float64(v)
			}
			return out
		}
		h := make([]float32, p.n)
		be.Read(b, h)
		for i, v := range h {
			out[i] = float64(v)
		}
		return out
	}
	return get(e.dev, p.dev.Buf), get(e.ref, p.ref.Buf)
}

// compare checks the whole buffers of p (elements outside the view must
// be untouched on both) and returns the largest scaled difference.
func (e *opsEnv) compare(what string, p pair, tol float64) float64 {
	e.t.Helper()
	got, want := e.read(p)
	worst, bad := 0.0, -1
	for i := range got {
		g, w := got[i], want[i]
		var d float64
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				d = math.Inf(1)
			}
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				d = math.Inf(1)
			}
		default:
			d = math.Abs(g-w) / max(1, math.Abs(w))
		}
		if d > worst {
			worst = d
		}
		if d > tol && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		e.t.Errorf("%s: maxdiff %.2e > tol %.0e; first at element %d: got %.9g, want %.9g", what, worst, tol, bad, got[bad], want[bad])
	}
	return worst
}

// both runs fn on the device and on the reference.
func (e *opsEnv) both(fn func(be backend.Backend, pick func(pair) backend.View)) {
	fn(e.dev, func(p pair) backend.View { return p.dev })
	fn(e.ref, func(p pair) backend.View { return p.ref })
}

// manyDims is a view of 10 dimensions of 2 whose strides cannot be
// coalesced (every other dimension skips one), with an offset.
func manyDims() vspec {
	shape := make([]int, 10)
	strides := make([]int, 10)
	s := 1
	for d := 9; d >= 0; d-- {
		shape[d] = 2
		strides[d] = s
		s *= 3
	}
	return vspec{shape: shape, strides: strides, off: 5}
}

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

func TestOpsReduce(t *testing.T) {
	e := newOpsEnv(t)
	type rcase struct {
		src  vspec
		nred int
	}
	cases := []rcase{
		{contig(7, 13), 1},
		{contig(3, 5, 33), 2},
		{contig(5000), 1},    // one output, 1024 threads
		{contig(300, 70), 1}, // many outputs
		{vspec{shape: []int{13, 7}, strides: []int{1, 13}}, 1}, // down columns
		{vspec{shape: []int{4, 6, 5}, strides: []int{1, 20, 4}, off: 3}, 2},
		{vspec{shape: []int{4, 9}, strides: []int{0, 1}}, 1},
		{contig(4, 3), 0},
		{manyDims(), 5},
		{manyDims(), 9},
	}
	for op := backend.ReduceSum; op < backend.NumReduceOps; op++ {
		worst := 0.0
		for _, c := range cases {
			gen := e.normal
			if op != backend.ReduceSum {
				gen = func(int) float64 { return float64(e.rng.IntN(9)) } // ties
			}
			src := e.newPair(backend.Float32, c.src, gen)
			k := len(c.src.shape) - c.nred
			ddt := backend.Float32
			if op >= backend.ReduceArgMax {
				ddt = backend.Int32
			}
			dst := e.newPair(ddt, contig(c.src.shape[:k]...), func(int) float64 { return -7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(dst), v(src), c.nred) })
			worst = max(worst, e.compare(fmt.Sprintf("reduce %v %v nred %d", op, c.src, c.nred), dst, opsTol))
		}
		// NaN and infinities: max/min propagate NaN, arg ops report the first NaN.
		specials := [][]float64{
			{1, math.NaN(), 3, math.NaN()},
			{math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)},
			{2, math.Inf(1), 5, math.Inf(1)},
			{-1, -1, -1, -1},
		}
		for _, row := range specials {
			src := e.newPair(backend.Float32, contig(40, 4), func(i int) float64 { return row[i%4] })
			ddt := backend.Float32
			if op >= backend.ReduceArgMax {
				ddt = backend.Int32
			}
			dst := e.newPair(ddt, contig(40), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(dst), v(src), 1) })
			e.compare(fmt.Sprintf("reduce %v of %v", op, row), dst, opsTol)
		}
		t.Logf("reduce %-7v maxdiff %.2e", op, worst)
	}
}

func TestOpsSoftmax(t *testing.T) {
	e := newOpsEnv(t)
	for _, log := range []bool{false, true} {
		worstF, worstB := 0.0, 0.0
		for _, sh := range [][]int{{1}, {5, 7}, {3, 1000}, {2, 3, 33}, {64, 31}, {1, 4099}} {
			x := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 4 * e.rng.NormFloat64() })
			y := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), log) })
			worstF = max(worstF, e.compare(fmt.Sprintf("softmax log=%v %v", log, sh), y, opsTol))
			// The backward from the CPU's y on both (so only the backward differs).
			yh := make([]float32, y.n)
			e.ref.Read(y.ref.Buf, yh)
			yy := e.newPair(backend.Float32, contig(sh...), func(i int) float64 { return float64(yh[i]) })
			dy := e.newPair(backend.Float32, contig(sh...), e.normal)
			dx := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SoftmaxBackward(v(dx), v(yy), v(dy), log) })
			worstB = max(worstB, e.compare(fmt.Sprintf("softmax_backward log=%v %v", log, sh), dx, opsTol))
		}
		// Rows with NaN, +Inf, only −Inf, and −Inf among finite values.
		rows := [][]float64{
			{1, math.NaN(), 2}, {1, math.Inf(1), 2}, {math.Inf(-1), math.Inf(-1), math.Inf(-1)}, {math.Inf(-1), 3, 1},
		}
		for _, r := range rows {
			x := e.newPair(backend.Float32, contig(2, 3), func(i int) float64 { return r[i%3] })
			y := e.newPair(backend.Float32, contig(2, 3), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), log) })
			e.compare(fmt.Sprintf("softmax log=%v of %v", log, r), y, opsTol)
		}
		t.Logf("softmax log=%v: forward maxdiff %.2e, backward maxdiff %.2e", log, worstF, worstB)
	}
}

// mmOperand is a (batch…, rows, cols) operand, row-major or column-major
// in its last two dims (trans), with batch strides (0 = broadcast).
func mmOperand(batch []int, bstrides []int, rows, cols int, trans bool, off int) vspec {
	mat := rows * cols
	shape := append(append([]int(nil), batch...), rows, cols)
	strides := make([]int, 0, len(shape))
	for i := range batch {
		strides = append(strides, bstrides[i]*mat)
	}
	if trans {
		strides = append(strides, 1, rows)
	} else {
		strides = append(strides, cols, 1)
	}
	return vspec{shape: shape, strides: strides, off: off}
}

func TestOpsMatMul(t *testing.T) {
	e := newOpsEnv(t)
	type mcase struct {
		m, n, k int
	}
	sizes := []mcase{{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {64, 64, 64}, {32, 32, 16}, {8, 40, 3}, {1, 70, 33}, {45, 1, 20}}
	for _, naive := range []bool{false, true} {
		naiveMatMul.Store(naive)
		worst := 0.0
		for _, s := range sizes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						a := e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 1), e.normal)
						b := e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 2), e.normal)
						c := e.newPair(backend.Float32, contig(s.m, s.n), e.normal)
						e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
						worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v %dx%dx%d ta=%v tb=%v acc=%v", naive, s.m, s.n, s.k, ta, tb, acc), c, opsTol))
					}
				}
			}
		}
		// Batched: a (2, 3, M, K) with its batch dim 0 broadcast, b (3, K, N)
		// transposed, dst (2, 3, M, N); and a (5, M, K) @ b (K, N).
		for _, s := range []mcase{{7, 13, 5}, {33, 40, 17}} {
			for _, acc := range []bool{false, true} {
				a := e.newPair(backend.Float32, mmOperand([]int{2, 3}, []int{0, 1}, s.m, s.k, false, 0), e.normal)
				b := e.newPair(backend.Float32, mmOperand([]int{3}, []int{1}, s.k, s.n, true, 3), e.normal)
				c := e.newPair(backend.Float32, contig(2, 3, s.m, s.n), e.normal)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
				worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v batched bcast %v acc=%v", naive, s, acc), c, opsTol))

				a2 := e.newPair(backend.Float32, mmOperand([]int{5}, []int{1}, s.m, s.k, true, 0), e.normal)
				b2 := e.newPair(backend.Float32, contig(s.k, s.n), e.normal)
				c2 := e.newPair(backend.Float32, contig(5, s.m, s.n), e.normal)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c2), v(a2), v(b2), acc) })
				worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v batched x 2d %v acc=%v", naive, s, acc), c2, opsTol))
			}
		}
		// K = 0: dst = 0, or unchanged when accumulating.
		for _, acc := range []bool{false, true} {
			a := e.newPair(backend.Float32, contig(3, 0), e.normal)
			b := e.newPair(backend.Float32, contig(0, 4), e.normal)
			c := e.newPair(backend.Float32, contig(3, 4), e.normal)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
			e.compare(fmt.Sprintf("matmul naive=%v K=0 acc=%v", naive, acc), c, 0)
		}
		t.Logf("matmul naive=%v maxdiff %.2e", naive, worst)
	}
	naiveMatMul.Store(false)
}

func TestOpsFloat64Refused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kFill:        func() { b.Fill(f64, 1) },
			kCopy:        func() { b.Copy(f64, f64) },
			kUnary:       func() { b.Unary(backend.Exp, backend.Scalars{}, f64, f64) },
			kBinary:      func() { b.Binary(backend.Add, f64, f64, f64) },
			kWhere:       func() { b.Where(f64, f64, f64, f64) },
			kReduce:      func() { b.Reduce(backend.ReduceSum, f64, f64, 1) },
			kSoftmax:     func() { b.Softmax(f64, f64, false) },
			kSoftmaxBack: func() { b.SoftmaxBackward(f64, f64, f64, true) },
			kUnaryGrad:   func() { b.UnaryGrad(backend.Tanh, backend.Scalars{}, f64, f64, f64, f64) },
			kMatMul:      func() { b.MatMul(f64, f64, f64, false) },
		}
	})
}

type f64Buf struct{}

func (f64Buf) Len() int             { return 2 }
func (f64Buf) DType() backend.DType { return backend.Float64 }

// refusesFloat64 makes the calls (by the name of the kernel each would
// launch) on a Backend without a device, with float64 views: each must
// panic "metal: <kernel>: float64 is not supported" (the dtype check runs
// before any kernel).
func refusesFloat64(t *testing.T, calls func(b *Backend, f64 backend.View) map[string]func()) {
	t.Helper()
	f64 := backend.View{Buf: f64Buf{}, Shape: []int{2}, Strides: []int{1}}
	for name, fn := range calls(&Backend{}, f64) {
		wantPanic(t, name+" on float64", fn, "metal: "+name+": float64 is not supported")
	}
}

// opsPanic runs fn and returns its panic message, or "no panic".
func opsPanic(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return "no panic"
}

// wantPanic requires fn (the call name) to panic with a message that
// starts with prefix and contains each of words.
func wantPanic(t *testing.T, name string, fn func(), prefix string, words ...string) {
	t.Helper()
	msg := opsPanic(fn)
	if msg == "no panic" {
		t.Errorf("%s: no panic", name)
		return
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("%s: panic %q, want it to start %q", name, msg, prefix)
		return
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: panic %q does not say %q", name, msg, w)
		}
	}
}

// TestOpsSchedules runs the kernels with threadgroup memory, barriers and
// simdgroup operations under the emulator's forward, reverse and random
// thread orders: the results must agree bit for bit (a missing barrier
// shows up as a result that depends on the order; a reduction whose order
// is not fixed, as one that differs).
func TestOpsSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(3, 4))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(gen.NormFloat64())
		}
		return v
	}
	in1, in2, in3 := vals(5000), vals(64*300), vals(33*17+17*65+33*65)
	run := func() [][]uint32 {
		var outs [][]uint32
		read := func(buf backend.Buffer, n int) { outs = append(outs, readBits(e.dev, buf, n)) }
		up := func(v []float32) backend.Buffer {
			b := e.dev.Alloc(backend.Float32, len(v))
			e.dev.Write(b, v)
			return b
		}
		v := contigView
		x1, x2, x3 := up(in1), up(in2), up(in3)
		for _, op := range []backend.ReduceOp{backend.ReduceSum, backend.ReduceMax, backend.ReduceArgMin} {
			for _, sh := range [][]int{{5000}, {100, 50}} {
				dt := backend.Float32
				if op == backend.ReduceArgMin {
					dt = backend.Int32
				}
				d := e.dev.Alloc(dt, 100)
				e.dev.Reduce(op, v(d, 0, sh[:len(sh)-1]...), v(x1, 0, sh...), 1)
				read(d, 5000/sh[len(sh)-1])
			}
		}
		for _, log := range []bool{false, true} {
			y := e.dev.Alloc(backend.Float32, 64*300)
			e.dev.Softmax(v(y, 0, 64, 300), v(x2, 0, 64, 300), log)
			dx := e.dev.Alloc(backend.Float32, 64*300)
			e.dev.SoftmaxBackward(v(dx, 0, 64, 300), v(y, 0, 64, 300), v(x2, 0, 64, 300), log)
			read(y, 64*300)
			read(dx, 64*300)
		}
		c := e.dev.Alloc(backend.Float32, 33*65)
		e.dev.Copy(v(c, 0, 33*65), v(x3, 33*17+17*65, 33*65))
		a := backend.View{Buf: x3, Shape: []int{33, 17}, Strides: []int{1, 33}}
		bm := backend.View{Buf: x3, Offset: 33 * 17, Shape: []int{17, 65}, Strides: []int{1, 17}}
		e.dev.MatMul(v(c, 0, 33, 65), a, bm, true)
		read(c, 33*65)
		return outs
	}
	schedulesAgree(t, drv, run, nil)
}

// Emulator timings of representative launches (go test -bench Ops -run
// '^$' ./metal). On the emulator they measure the emulation, not a GPU.
func BenchmarkOps(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0, shape...) }
	for _, s := range []int{64, 128, 256} {
		a, bm, c := up(s, s), up(s, s), up(s, s)
		for _, naive := range []bool{false, true} {
			name := fmt.Sprintf("matmul_%d_tiled", s)
			if naive {
				name = fmt.Sprintf("matmul_%d_naive", s)
			}
			b.Run(name, func(b *testing.B) {
				naiveMatMul.Store(naive)
				defer naiveMatMul.Store(false)
				for b.Loop() {
					dev.MatMul(c, a, bm, false)
					dev.Sync()
				}
			})
		}
	}
	x, y := up(64, 1024), up(64, 1024)
	b.Run("softmax_64x1024", func(b *testing.B) {
		for b.Loop() {
			dev.Softmax(y, x, false)
			dev.Sync()
		}
	})
	big, out := up(1<<20), up(1)
	b.Run("reduce_sum_1M", func(b *testing.B) {
		for b.Loop() {
			dev.Reduce(backend.ReduceSum, backend.View{Buf: out.Buf, Shape: []int{}, Strides: []int{}}, big, 1)
			dev.Sync()
		}
	})
	big2, big3 := up(1<<20), up(1<<20)
	b.Run("binary_add_1M", func(b *testing.B) {
		for b.Loop() {
			dev.Binary(backend.Add, big3, big, big2)
			dev.Sync()
		}
	})
}

func opsBenchDevice(b *testing.B) *Backend {
	drv, err := emu.Open(kernels.Sources(), emu.Options{})
	if err != nil {
		skipUnavailable(b, err)
	}
	return New(drv)
}

// benchView is a contiguous float32 tensor of shape on dev holding
// i%17/17 + base.
func benchView(dev *Backend, base float32, shape ...int) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := dev.Alloc(backend.Float32, n)
	h := make([]float32, n)
	for i := range h {
		h[i] = float32(i%17)/17 + base
	}
	dev.Write(buf, h)
	return contigView(buf, 0, shape...)
}

// TestOpsManyRows covers more rows than one grid dimension holds (65535
// threadgroups): the row kernels spread them over a 2-D grid.
func TestOpsManyRows(t *testing.T) {
	e := newOpsEnv(t)
	const rows = 65535 + 77
	x := e.newPair(backend.Float32, contig(rows, 3), e.normal)
	y := e.newPair(backend.Float32, contig(rows, 3), func(int) float64 { return 0 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), true) })
	e.compare("log_softmax of many rows", y, opsTol)
	dx := e.newPair(backend.Float32, contig(rows, 3), func(int) float64 { return 0 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.SoftmaxBackward(v(dx), v(y), v(x), true) })
	e.compare("log_softmax backward of many rows", dx, opsTol)
	s := e.newPair(backend.Int32, contig(rows), func(int) float64 { return -1 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(backend.ReduceArgMax, v(s), v(x), 1) })
	e.compare("argmax of many rows", s, 0)
}

// TestOpsEmpty covers empty extents: a sum over nothing is 0, ops on no
// elements do nothing.
func TestOpsEmpty(t *testing.T) {
	e := newOpsEnv(t)
	src := e.newPair(backend.Float32, contig(4, 0), e.normal)
	dst := e.newPair(backend.Float32, contig(4), func(int) float64 { return 5 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(backend.ReduceSum, v(dst), v(src), 1) })
	e.compare("sum over an empty extent", dst, 0)
	none := e.newPair(backend.Float32, contig(0, 3), e.normal)
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.Fill(v(none), 1)
		be.Unary(backend.Exp, backend.Scalars{}, v(none), v(none))
		be.Binary(backend.Add, v(none), v(none), v(none))
		be.Softmax(v(none), v(none), false)
		be.Reduce(backend.ReduceMax, backend.View{Buf: v(dst).Buf, Shape: []int{0}, Strides: []int{1}}, v(none), 1)
	})
	e.compare("ops on no elements", none, 0)
	e.compare("max over no rows", dst, 0)
	wantPanic(t, "max over an empty extent", func() { e.dev.Reduce(backend.ReduceMax, dst.dev, src.dev, 1) }, "")
}

// TestOpsUnknownOp: an op number past the last (backend.NumUnaryOps, …)
// panics naming the kernel, before any table is indexed with it; and the
// dispatch labels cover every op.
func TestOpsUnknownOp(t *testing.T) {
	b := &Backend{} // no device: the checks come first
	v := backend.View{Buf: f64Buf{}, Shape: []int{2}, Strides: []int{1}}
	wantPanic(t, "unary", func() { b.Unary(backend.NumUnaryOps, backend.Scalars{}, v, v) }, "metal: unary_f32: unknown op")
	wantPanic(t, "unary_grad", func() { b.UnaryGrad(backend.NumUnaryOps, backend.Scalars{}, v, v, v, v) }, "metal: unary_grad_f32: unknown op")
	wantPanic(t, "binary", func() { b.Binary(backend.NumBinaryOps, v, v, v) }, "metal: binary_f32: unknown op")
	for _, dt := range floatTypes {
		for name, l := range map[string]struct{ got, want int }{
			"unary":      {len(unaryLabels[dt]), int(backend.NumUnaryOps)},
			"unary_grad": {len(unaryGradLabels[dt]), int(backend.NumUnaryOps)},
			"binary":     {len(binaryLabels[dt]), int(backend.NumBinaryOps)},
			"reduce":     {len(reduceLabels[dt]), int(backend.NumReduceOps)},
		} {
			if l.got != l.want {
				t.Errorf("%s %v: %d dispatch labels for %d ops", name, dt, l.got, l.want)
			}
		}
	}
}

// TestOpsKernelNames checks that every kernel the ops launch is defined in
// the embedded sources (the Metal driver finds its file by name).
func TestOpsKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kFill, kCopy, kUnary, kUnaryGrad, kBinary, kWhere, kReduce, kSoftmax, kSoftmaxBack, kMatMul, kMatMulNaive} {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// schedulesAgree runs run (which launches kernels on drv and returns the
// bits of their outputs) under the forward schedule, then again under
// forward, reverse and three random schedules, and reports every output
// that differs from the first run: a kernel whose result depends on the
// order of its threads is missing a barrier. label, if not nil, names
// output i in the message.
func schedulesAgree(t *testing.T, drv *emu.Driver, run func() [][]uint32, label func(i int) string) {
	t.Helper()
	drv.SetSchedule(emu.Forward, 0)
	want := run()
	for _, s := range []struct {
		s    emu.Schedule
		seed uint64
	}{{emu.Forward, 0}, {emu.Reverse, 0}, {emu.Random, 1}, {emu.Random, 2}, {emu.Random, 3}} {
		drv.SetSchedule(s.s, s.seed)
		got := run()
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					what := fmt.Sprintf("output %d", i)
					if label != nil {
						what += " (" + label(i) + ")"
					}
					t.Errorf("schedule %v seed %d: %s element %d: %08x, the first forward run gives %08x", s.s, s.seed, what, j, got[i][j], want[i][j])
					break
				}
			}
		}
	}
	drv.SetSchedule(emu.Forward, 0)
}

// readBits returns the bits of b's first n elements (float32, int32 or
// 16-bit) on dev, for schedulesAgree.
func readBits(dev *Backend, b backend.Buffer, n int) []uint32 {
	bits := make([]uint32, n)
	switch b.DType() {
	case backend.Float32:
		h := make([]float32, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = math.Float32bits(x)
		}
	case backend.Int32:
		h := make([]int32, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = uint32(x)
		}
	default:
		h := make([]uint16, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = uint32(x)
		}
	}
	return bits
}

// contigView is the contiguous view of shape at offset off of b.
func contigView(b backend.Buffer, off int, shape ...int) backend.View {
	return backend.View{Buf: b, Offset: off, Shape: shape, Strides: backend.ContiguousStrides(shape)}
}
