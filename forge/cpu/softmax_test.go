package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// Helpers shared by the row-kernel tests (softmax, norms, RoPE, indexing,
// cross-entropy). Names start with rk to stay clear of other test files.

// rkCs are the odd row lengths every row kernel is tried on.
var rkCs = []int{1, 3, 7, 33, 257}

// rkNs returns row counts for row length c: a single row, a few rows, and
// enough rows that every kernel takes its parallel path.
func rkNs(c int) []int { return []int{1, 5, 4*minGrain/c + 3} }

var rkDTypes = []backend.DType{backend.Float32, backend.Float64}

// rkBackend returns a CPU backend with k workers (k ≤ 0: GOMAXPROCS, at
// least 4 so the parallel paths split even on a small machine).
func rkBackend(k int) *Backend {
	b := New()
	if k > 0 {
		b.workers = k
	} else {
		b.workers = max(b.workers, 4)
	}
	return b
}

// rkPad is the number of guard elements placed before and after a view's
// data; they hold NaN, so a kernel that reads outside its view produces NaN
// and one that writes outside is caught by rkCheckPads.
const rkPad = 3

// rkView returns a contiguous view of dtype dt and the given shape at offset
// rkPad of a buffer guarded by NaNs (or -7 for Int32), holding data
// (converted; nil leaves zeros).
func rkView(dt backend.DType, shape []int, data []float64) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	total := n + 2*rkPad
	buf := &Buffer{}
	switch dt {
	case backend.Float32:
		buf.F32 = make([]float32, total)
		for i := range buf.F32 {
			buf.F32[i] = float32(math.NaN())
		}
		for i := 0; i < n; i++ {
			buf.F32[rkPad+i] = 0
			if data != nil {
				buf.F32[rkPad+i] = float32(data[i])
			}
		}
	case backend.Float64:
		buf.F64 = make([]float64, total)
		for i := range buf.F64 {
			buf.F64[i] = math.NaN()
		}
		for i := 0; i < n; i++ {
			buf.F64[rkPad+i] = 0
			if data != nil {
				buf.F64[rkPad+i] = data[i]
			}
		}
	case backend.Int32:
		buf.I32 = make([]int32, total)
		for i := range buf.I32 {
			buf.I32[i] = -7
		}
		for i := 0; i < n; i++ {
			buf.I32[rkPad+i] = 0
			if data != nil {
				buf.I32[rkPad+i] = int32(data[i])
			}
		}
	}
	return backend.View{Buf: buf, Offset: rkPad, Shape: append([]int(nil), shape...),
		Strides: backend.ContiguousStrides(shape)}
}

// rkRead returns the view's elements (contiguous) as float64.
func rkRead(v backend.View) []float64 {
	n := v.Numel()
	out := make([]float64, n)
	bf := buf(v)
	for i := range out {
		switch {
		case bf.F32 != nil:
			out[i] = float64(bf.F32[v.Offset+i])
		case bf.F64 != nil:
			out[i] = bf.F64[v.Offset+i]
		default:
			out[i] = float64(bf.I32[v.Offset+i])
		}
	}
	return out
}

// rkCheckPads fails the test if a kernel wrote into v's guard elements.
func rkCheckPads(t *testing.T, name string, v backend.View) {
	t.Helper()
	bf := buf(v)
	n := v.Numel()
	for _, i := range []int{0, 1, 2, rkPad + n, rkPad + n + 1, rkPad + n + 2} {
		ok := true
		switch {
		case bf.F32 != nil:
			ok = math.IsNaN(float64(bf.F32[i]))
		case bf.F64 != nil:
			ok = math.IsNaN(bf.F64[i])
		default:
			ok = bf.I32[i] == -7
		}
		if !ok {
			t.Fatalf("%s: wrote outside its view (guard element %d)", name, i)
		}
	}
}

// rkRound32 rounds every value to float32, so float32 and float64 runs of a
// kernel see the same inputs.
func rkRound32(x []float64) []float64 {
	for i, v := range x {
		x[i] = float64(float32(v))
	}
	return x
}

// rkNormal returns n float32-representable values scale·N(0,1) + shift.
func rkNormal(rng *rand.Rand, n int, scale, shift float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = shift + scale*rng.NormFloat64()
	}
	return rkRound32(x)
}

// rkRelErr returns max_i |got_i − want_i| / max(|want_i|, floor). NaN must
// match NaN and infinities must match exactly; a mismatch gives +Inf.
func rkRelErr(got, want []float64, floor float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	worst := 0.0
	for i, w := range want {
		g := got[i]
		switch {
		case g == w:
			continue
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				return math.Inf(1)
			}
			continue
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				return math.Inf(1)
			}
			continue
		}
		worst = max(worst, math.Abs(g-w)/max(math.Abs(w), floor))
	}
	return worst
}

// rkMaxAbs returns the largest finite |x_i|.
func rkMaxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			m = max(m, math.Abs(v))
		}
	}
	return m
}

// rkFDStep is the default finite-difference step. With the fourth-order
// central stencil of rkFD the truncation error is O(h⁴) ≈ 1e-16 and the
// rounding error about 1.5·ε·S/h ≈ 2e-12·S, S = Σ|terms of f|.
const rkFDStep = 1e-4

// rkFD returns the central difference of f along x_i with step h,
// (f(x−2h) − 8f(x−h) + 8f(x+h) − f(x+2h)) / 12h, and restores x[i].
func rkFD(x []float64, i int, h float64, f func() float64) float64 {
	x0 := x[i]
	at := func(d float64) float64 {
		x[i] = x0 + d
		return f()
	}
	d := (at(-2*h) - 8*at(-h) + 8*at(h) - at(2*h)) / (12 * h)
	x[i] = x0
	return d
}

// rkFDErr compares the analytic gradient with rkFD (step h, 0 for
// rkFDStep) along the coordinates js of x (nil: all of them; an[k] is
// ∂f/∂x[js[k]]) and returns the worst
// relative error. f returns its value and S, the sum of the magnitudes of
// its terms, which sets the stencil's rounding noise (2e-12·S to 1e-11·S).
// Entries are compared relative to max(|fd|, 1% of the largest |fd|,
// 1e-5·S): below the last term the noise would dominate a relative error of
// 1e-6, so such entries are held to an absolute 1e-11·S instead, about what
// the stencil can resolve.
func rkFDErr(an, x []float64, js []int, h float64, f func() (v, s float64)) float64 {
	if h == 0 {
		h = rkFDStep
	}
	if js == nil {
		js = make([]int, len(x))
		for j := range js {
			js[j] = j
		}
	}
	val := func() float64 { v, _ := f(); return v }
	fd := make([]float64, len(js))
	for k, j := range js {
		fd[k] = rkFD(x, j, h, val)
	}
	_, s := f()
	floor := max(1e-2*rkMaxAbs(fd), 1e-5*s, 1e-300)
	return rkRelErr(an, fd, floor)
}

// rkDotAbs returns Σ a_i·b_i and Σ |a_i·b_i|.
func rkDotAbs(a, b []float64) (float64, float64) {
	s, m := 0.0, 0.0
	for i := range a {
		s += a[i] * b[i]
		m += math.Abs(a[i] * b[i])
	}
	return s, m
}

// rkDot returns Σ a_i·b_i.
func rkDot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// rkSample returns the indices of n to check by finite differences: all of
// them when n ≤ k, else the first, the last and about k spread between
// (crossing every worker's chunk boundary).
func rkSample(n, k int) []int {
	if n <= k {
		rows := make([]int, n)
		for i := range rows {
			rows[i] = i
		}
		return rows
	}
	var rows []int
	for r := 0; r < n-1; r += (n + k - 1) / k {
		rows = append(rows, r)
	}
	return append(rows, n-1)
}

// rkWorst tracks and reports the worst difference of a named family.
type rkWorst map[string]float64

func (w rkWorst) add(name string, v float64) { w[name] = max(w[name], v) }

func (w rkWorst) log(t *testing.T) {
	t.Helper()
	for name, v := range w {
		t.Logf("worst %-40s %.3g", name, v)
	}
}

// ---------------------------------------------------------------------------
// Softmax

// rkSoftmaxData returns (n, c) logits: mostly scale-3 normals, with rows of
// large positive and large negative values (exp overflows without the max
// shift, in float32 and float64), −Inf entries, ties, a wide spread, and,
// when n ≥ 5, a last row of −Inf only.
func rkSoftmaxData(rng *rand.Rand, n, c int) []float64 {
	x := rkNormal(rng, n*c, 3, 0)
	for r := 0; r < n; r++ {
		row := x[r*c : (r+1)*c]
		switch r % 7 {
		case 1:
			copy(row, rkNormal(rng, c, 10, 1e4))
		case 2:
			copy(row, rkNormal(rng, c, 10, -1e4))
		case 3:
			for j := 1; j < c; j += 3 {
				row[j] = math.Inf(-1)
			}
		case 4:
			for j := range row {
				row[j] = 0.5
			}
		case 5:
			copy(row, rkNormal(rng, c, 300, 0))
		}
	}
	if n >= 5 {
		for j := 0; j < c; j++ {
			x[(n-1)*c+j] = math.Inf(-1)
		}
	}
	return x
}

// rkRefSoftmax is the textbook two-pass softmax (or log_softmax) of each
// row, in float64. log_softmax takes log Σ as log1p of the sum without the
// first maximal term (exactly 1): log of the full sum, 1 + ε, is only good
// to ~1e-16 absolutely, which outputs near 0 (−ε) cannot afford.
func rkRefSoftmax(x []float64, n, c int, log bool) []float64 {
	y := make([]float64, n*c)
	for r := 0; r < n; r++ {
		m, jm := math.Inf(-1), -1
		for j := 0; j < c; j++ {
			if x[r*c+j] > m {
				m, jm = x[r*c+j], j
			}
		}
		sum, rest := 0.0, 0.0
		for j := 0; j < c; j++ {
			e := math.Exp(x[r*c+j] - m)
			sum += e
			if j != jm {
				rest += e
			}
		}
		if math.IsInf(m, 0) {
			rest = math.NaN()
		}
		for j := 0; j < c; j++ {
			if log {
				y[r*c+j] = x[r*c+j] - m - math.Log1p(rest)
			} else {
				y[r*c+j] = math.Exp(x[r*c+j]-m) / sum
			}
		}
	}
	return y
}

func rkSoftmaxName(log bool) string {
	if log {
		return "log_softmax"
	}
	return "softmax"
}

func TestSoftmaxForward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(1, 2))
	worst := rkWorst{}
	for _, log := range []bool{false, true} {
		for _, c := range rkCs {
			for _, n := range rkNs(c) {
				x := rkSoftmaxData(rng, n, c)
				want := rkRefSoftmax(x, n, c, log)
				for _, dt := range rkDTypes {
					name := fmt.Sprintf("%s %v", rkSoftmaxName(log), dt)
					xv, yv := rkView(dt, []int{n, c}, x), rkView(dt, []int{n, c}, nil)
					b.Softmax(yv, xv, log)
					rkCheckPads(t, name, yv)
					tol, floor := 1e-12, 1e-300
					if dt == backend.Float32 {
						// Below 1e-30 float32 loses relative precision
						// to underflow (denormals start at 1.2e-38).
						tol, floor = 1e-6, 1e-30
					}
					e := rkRelErr(rkRead(yv), want, floor)
					worst.add(name, e)
					if e > tol {
						t.Errorf("%s N=%d C=%d: relative error %.3g > %.g", name, n, c, e, tol)
					}
				}
			}
		}
	}
	worst.log(t)
}

// TestSoftmaxSpecialRows pins PyTorch's behaviour on rows that are not
// finite: a row of −Inf only, or holding NaN or +Inf, is NaN; −Inf entries
// of an otherwise finite row get exactly 0 (−Inf for log_softmax).
func TestSoftmaxSpecialRows(t *testing.T) {
	b := rkBackend(1)
	inf, nan := math.Inf(1), math.NaN()
	x := []float64{
		-inf, -inf, -inf,
		1, nan, 2,
		inf, 1, 2,
		-inf, 0, -inf,
		1e30, -1e30, 1e30,
	}
	for _, dt := range rkDTypes {
		xv := rkView(dt, []int{5, 3}, x)
		yv, lv := rkView(dt, []int{5, 3}, nil), rkView(dt, []int{5, 3}, nil)
		b.Softmax(yv, xv, false)
		b.Softmax(lv, xv, true)
		y, l := rkRead(yv), rkRead(lv)
		for j := 0; j < 9; j++ {
			if !math.IsNaN(y[j]) || !math.IsNaN(l[j]) {
				t.Errorf("%v: element %d of a −Inf/NaN/+Inf row: softmax %v, log %v, want NaN", dt, j, y[j], l[j])
			}
		}
		if y[9] != 0 || y[10] != 1 || y[11] != 0 || !math.IsInf(l[9], -1) || l[10] != 0 || !math.IsInf(l[11], -1) {
			t.Errorf("%v: masked row: softmax %v, log %v", dt, y[9:12], l[9:12])
		}
		if dt == backend.Float64 && (y[12] != 0.5 || y[13] != 0 || y[14] != 0.5) {
			t.Errorf("%v: huge row: softmax %v, want [0.5 0 0.5]", dt, y[12:15])
		}
	}
}

// TestSoftmaxBackward checks the float64 backward against central
// differences of the float64 forward, and the float32 backward against the
// float64 backward on the same inputs.
func TestSoftmaxBackward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(3, 4))
	worst := rkWorst{}
	for _, log := range []bool{false, true} {
		name := rkSoftmaxName(log)
		for _, c := range rkCs {
			for _, n := range rkNs(c) {
				x := rkNormal(rng, n*c, 3, 0)
				for r := 2; r < n; r += 5 {
					copy(x[r*c:(r+1)*c], rkNormal(rng, c, 5, 200)) // large logits
				}
				dy := rkNormal(rng, n*c, 1, 0)
				shape := []int{n, c}
				// Forward in float64 and float32, then both backwards.
				y := map[backend.DType][]float64{}
				dx := map[backend.DType][]float64{}
				for _, dt := range rkDTypes {
					yv := rkView(dt, shape, nil)
					b.Softmax(yv, rkView(dt, shape, x), log)
					y[dt] = rkRead(yv)
				}
				for _, dt := range rkDTypes {
					dxv := rkView(dt, shape, nil)
					// Both dtypes differentiate at the float32 forward output,
					// so they compute the same function of the same inputs.
					b.SoftmaxBackward(dxv, rkView(dt, shape, y[backend.Float32]), rkView(dt, shape, dy), log)
					rkCheckPads(t, name+" backward", dxv)
					dx[dt] = rkRead(dxv)
				}
				e32 := rkRelErr(dx[backend.Float32], dx[backend.Float64], 1e-3*rkMaxAbs(dx[backend.Float64]))
				worst.add(name+" backward f32 vs f64", e32)
				if e32 > 1e-6 {
					t.Errorf("%s backward N=%d C=%d: float32 vs float64 relative error %.3g", name, n, c, e32)
				}
				// Finite differences of L = Σ dy·softmax(x) row by row, with
				// the exact float64 output.
				dxv := rkView(backend.Float64, shape, nil)
				b.SoftmaxBackward(dxv, rkView(backend.Float64, shape, y[backend.Float64]), rkView(backend.Float64, shape, dy), log)
				an := rkRead(dxv)
				for _, r := range rkSample(n, 40) {
					xr, gr := x[r*c:(r+1)*c], dy[r*c:(r+1)*c]
					f := func() (float64, float64) {
						yv := rkView(backend.Float64, []int{1, c}, nil)
						b.Softmax(yv, rkView(backend.Float64, []int{1, c}, xr), log)
						return rkDotAbs(rkRead(yv), gr)
					}
					e := rkFDErr(an[r*c:(r+1)*c], xr, nil, 0, f)
					worst.add(name+" backward vs finite differences", e)
					if e > 1e-6 {
						t.Errorf("%s backward N=%d C=%d row %d: finite-difference relative error %.3g", name, n, c, r, e)
					}
				}
			}
		}
	}
	worst.log(t)
}

// ---------------------------------------------------------------------------
// Benchmarks: bytes are those a kernel must move (read x, write y).

const rkBenchN, rkBenchC, rkBenchV = 2048, 128, 512

func BenchmarkSoftmaxF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(5, 6))
	shape := []int{rkBenchN, rkBenchC}
	x, y := rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 3, 0)), rkView(backend.Float32, shape, nil)
	bb.SetBytes(int64(2 * 4 * rkBenchN * rkBenchC))
	for bb.Loop() {
		b.Softmax(y, x, false)
	}
}

func BenchmarkLogSoftmaxF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(5, 6))
	shape := []int{rkBenchN, rkBenchC}
	x, y := rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 3, 0)), rkView(backend.Float32, shape, nil)
	bb.SetBytes(int64(2 * 4 * rkBenchN * rkBenchC))
	for bb.Loop() {
		b.Softmax(y, x, true)
	}
}
