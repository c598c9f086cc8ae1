package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/internal/attnbound"
)

// attnCase is one attention configuration: q (B,H,Tq,D), k/v (B,Hkv,Tk,D).
type attnCase struct {
	B, H, Hkv, Tq, Tk, D int
	causal               bool
}

func (c attnCase) String() string {
	return fmt.Sprintf("B%d_H%d_Hkv%d_Tq%d_Tk%d_D%d_causal=%v", c.B, c.H, c.Hkv, c.Tq, c.Tk, c.D, c.causal)
}

func (c attnCase) scale() float64 { return 1 / math.Sqrt(float64(max(c.D, 1))) }

// sees is the mask, written independently of the kernel's: query row i of
// Tq sits at absolute position Tk−Tq+i.
func (c attnCase) sees(i, j int) bool { return !c.causal || j <= c.Tk-c.Tq+i }

// attnInputs are the float64 host values of one case; for a float32 run
// they are rounded to float32 first so both sides see the same numbers.
type attnInputs struct {
	q, k, v, dout []float64 // (B,H,Tq,D), (B,Hkv,Tk,D) ×2, (B,H,Tq,D)
}

func newAttnInputs(c attnCase, rng *rand.Rand, dt backend.DType) attnInputs {
	gen := func(n int, amp float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = amp * rng.NormFloat64()
			if dt == backend.Float32 {
				x[i] = float64(float32(x[i]))
			}
		}
		return x
	}
	nq, nk := c.B*c.H*c.Tq*c.D, c.B*c.Hkv*c.Tk*c.D
	// q is scaled up so the softmax is far from uniform (scores of a few
	// units, some rows dominated by one key).
	return attnInputs{q: gen(nq, 2), k: gen(nk, 1), v: gen(nk, 1), dout: gen(nq, 1)}
}

// refAttention is the naive float64 forward: materialise a row of scores,
// softmax it, take the weighted sum. out (B,H,Tq,D), lse (B,H,Tq). A row
// that sees no key gets out = 0 and lse = -Inf.
func refAttention(c attnCase, in attnInputs) (out, lse []float64) {
	out = make([]float64, c.B*c.H*c.Tq*c.D)
	lse = make([]float64, c.B*c.H*c.Tq)
	G := c.H / c.Hkv
	s := make([]float64, c.Tk)
	for b := 0; b < c.B; b++ {
		for h := 0; h < c.H; h++ {
			kv := (b*c.Hkv + h/G) * c.Tk * c.D
			for i := 0; i < c.Tq; i++ {
				qi := in.q[((b*c.H+h)*c.Tq+i)*c.D:][:c.D]
				m := math.Inf(-1)
				for j := 0; j < c.Tk; j++ {
					if !c.sees(i, j) {
						continue
					}
					var dot float64
					for d := 0; d < c.D; d++ {
						dot += qi[d] * in.k[kv+j*c.D+d]
					}
					s[j] = c.scale() * dot
					m = math.Max(m, s[j])
				}
				var l float64
				for j := 0; j < c.Tk; j++ {
					if c.sees(i, j) {
						l += math.Exp(s[j] - m)
					}
				}
				lse[(b*c.H+h)*c.Tq+i] = m + math.Log(l)
				if l == 0 {
					continue
				}
				o := out[((b*c.H+h)*c.Tq+i)*c.D:][:c.D]
				for j := 0; j < c.Tk; j++ {
					if !c.sees(i, j) {
						continue
					}
					p := math.Exp(s[j]-m) / l
					for d := 0; d < c.D; d++ {
						o[d] += p * in.v[kv+j*c.D+d]
					}
				}
			}
		}
	}
	return out, lse
}

// refAttentionBackward is the naive float64 backward, by hand: for each
// query row, P = softmax(S), dP_j = dO·v_j, dS_j = P_j (dP_j − Σ_k P_k dP_k),
// dq = scale Σ_j dS_j k_j, dk_j += scale dS_j q, dv_j += P_j dO.
func refAttentionBackward(c attnCase, in attnInputs) (dq, dk, dv []float64) {
	dq = make([]float64, c.B*c.H*c.Tq*c.D)
	dk = make([]float64, c.B*c.Hkv*c.Tk*c.D)
	dv = make([]float64, c.B*c.Hkv*c.Tk*c.D)
	G := c.H / c.Hkv
	p := make([]float64, c.Tk)
	dp := make([]float64, c.Tk)
	for b := 0; b < c.B; b++ {
		for h := 0; h < c.H; h++ {
			kv := (b*c.Hkv + h/G) * c.Tk * c.D
			for i := 0; i < c.Tq; i++ {
				row := ((b*c.H+h)*c.Tq + i) * c.D
				qi, doi := in.q[row:][:c.D], in.dout[row:][:c.D]
				m := math.Inf(-1)
				for j := 0; j < c.Tk; j++ {
					p[j] = 0
					if !c.sees(i, j) {
						continue
					}
					var dot float64
					for d := 0; d < c.D; d++ {
						dot += qi[d] * in.k[kv+j*c.D+d]
					}
					p[j] = c.scale() * dot
					m = math.Max(m, p[j])
				}
				var l float64
				for j := 0; j < c.Tk; j++ {
					if c.sees(i, j) {
						p[j] = math.Exp(p[j] - m)
						l += p[j]
					}
				}
				if l == 0 {
					continue
				}
				var sum float64 // Σ_j P_j dP_j
				for j := 0; j < c.Tk; j++ {
					if !c.sees(i, j) {
						continue
					}
					p[j] /= l
					var dot float64
					for d := 0; d < c.D; d++ {
						dot += doi[d] * in.v[kv+j*c.D+d]
					}
					dp[j] = dot
					sum += p[j] * dot
				}
				for j := 0; j < c.Tk; j++ {
					if !c.sees(i, j) {
						continue
					}
					ds := p[j] * (dp[j] - sum)
					for d := 0; d < c.D; d++ {
						dq[row+d] += c.scale() * ds * in.k[kv+j*c.D+d]
						dk[kv+j*c.D+d] += c.scale() * ds * qi[d]
						dv[kv+j*c.D+d] += p[j] * doi[d]
					}
				}
			}
		}
	}
	return dq, dk, dv
}

// attnView allocates a buffer holding data after off elements of NaN
// padding and returns a contiguous view of the given shape onto it.
func attnView(b *Backend, dt backend.DType, shape []int, data []float64, off int) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := b.Alloc(dt, off+n)
	host := make([]float64, off+n)
	for i := range host {
		host[i] = math.NaN()
	}
	if data != nil {
		copy(host[off:], data)
	}
	if dt == backend.Float32 {
		h32 := make([]float32, len(host))
		for i, x := range host {
			h32[i] = float32(x)
		}
		b.Write(buf, h32)
	} else {
		b.Write(buf, host)
	}
	return backend.View{Buf: buf, Offset: off, Shape: shape, Strides: backend.ContiguousStrides(shape)}
}

// attnRead returns the view's elements (contiguous) as float64.
func attnRead(b *Backend, v backend.View) []float64 {
	n := v.Numel()
	out := make([]float64, n)
	if v.DType() == backend.Float32 {
		h := make([]float32, v.Offset+n)
		b.Read(v.Buf, h)
		for i := range out {
			out[i] = float64(h[v.Offset+i])
		}
	} else {
		h := make([]float64, v.Offset+n)
		b.Read(v.Buf, h)
		copy(out, h[v.Offset:])
	}
	return out
}

// attnRun holds the kernel's results for one case.
type attnRun struct {
	out, lse, dq, dk, dv []float64
}

// runAttention runs the forward and backward kernels on in. Outputs start
// as NaN so any element the kernels fail to write shows up.
func runAttention(b *Backend, c attnCase, in attnInputs, dt backend.DType, off int) attnRun {
	qs := []int{c.B, c.H, c.Tq, c.D}
	ks := []int{c.B, c.Hkv, c.Tk, c.D}
	q := attnView(b, dt, qs, in.q, off)
	k := attnView(b, dt, ks, in.k, off+1)
	v := attnView(b, dt, ks, in.v, off+2)
	dout := attnView(b, dt, qs, in.dout, off+3)
	out := attnView(b, dt, qs, nil, off+4)
	lse := attnView(b, dt, []int{c.B, c.H, c.Tq}, nil, off+5)
	dq := attnView(b, dt, qs, nil, off+6)
	dk := attnView(b, dt, ks, nil, off+7)
	dv := attnView(b, dt, ks, nil, off+8)
	p := backend.AttentionParams{Scale: c.scale(), Causal: c.causal}
	b.Attention(out, lse, q, k, v, p)
	b.AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout, p)
	return attnRun{attnRead(b, out), attnRead(b, lse), attnRead(b, dq), attnRead(b, dk), attnRead(b, dv)}
}

// attnRelDiff is the largest |got − want| over the largest |want| (at least
// floor, for tensors that are legitimately all zero); NaN anywhere in got
// makes it +Inf.
func attnRelDiff(got, want []float64, floor float64) float64 {
	var diff, scale float64
	for i := range want {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		diff = math.Max(diff, math.Abs(got[i]-want[i]))
		scale = math.Max(scale, math.Abs(want[i]))
	}
	return diff / math.Max(scale, floor)
}

// attnCases is the comparison matrix: D × T × causal × grouping, plus the
// KV-cached decode shapes and rows of 300 keys (more than 256, the depth
// of one block of the Go gemm kernel). T is never a multiple of the 32-row block. -short
// keeps two head dims.
func attnCases() []attnCase {
	var cs []attnCase
	groups := [][2]int{{4, 4}, {4, 2}, {4, 1}}
	dims := []int{32, 64, 80, 128}
	if testing.Short() {
		dims = []int{32, 80}
	}
	for _, D := range dims {
		for _, T := range []int{1, 7, 65, 130} {
			for _, causal := range []bool{false, true} {
				for _, g := range groups {
					cs = append(cs, attnCase{B: 2, H: g[0], Hkv: g[1], Tq: T, Tk: T, D: D, causal: causal})
				}
			}
		}
		for _, Tq := range []int{1, 3} {
			for _, causal := range []bool{false, true} {
				for _, g := range groups {
					cs = append(cs, attnCase{B: 2, H: g[0], Hkv: g[1], Tq: Tq, Tk: 10, D: D, causal: causal})
				}
			}
		}
	}
	// Longer rows: 300 keys, 300 and 2 queries.
	for _, Tq := range []int{300, 2} {
		cs = append(cs, attnCase{B: 1, H: 2, Hkv: 1, Tq: Tq, Tk: 300, D: 48, causal: true})
	}
	return cs
}

// attnPrecisions are the dtypes the kernels run in and the arithmetic
// attnbound bounds their rounding error for.
var attnPrecisions = []struct {
	dt   backend.DType
	prec attnbound.Precision
}{{backend.Float32, attnbound.Float32}, {backend.Float64, attnbound.Float64}}

// attnCheck compares a run with the float64 reference element by element
// within attnbound.Tolerance (the rounding-error bound of the kernels'
// arithmetic in prec, plus the reference's own): the worst error/bound
// ratio per output, and the first element beyond its bound ("" if none).
func attnCheck(c attnCase, in attnInputs, prec attnbound.Precision, got, want attnRun) ([5]float64, string) {
	sh := attnbound.Shape{B: c.B, H: c.H, Hkv: c.Hkv, Tq: c.Tq, Tk: c.Tk, D: c.D, Scale: c.scale(), Causal: c.causal}
	tol := attnbound.Tolerance(sh, in.q, in.k, in.v, in.dout, prec)
	ts := func(r attnRun) attnbound.Tensors {
		return attnbound.Tensors{Out: r.out, LSE: r.lse, DQ: r.dq, DK: r.dk, DV: r.dv}
	}
	return attnbound.Check(ts(got), ts(want), tol)
}

// TestAttentionMatchesReference: every output element of the float32 and
// the float64 kernels is within the rounding-error bound of attnbound of
// the naive float64 loops — a worst case of the arithmetic in the
// kernels' precision, in any summation order, computed from the inputs,
// so that neither the BLAS in use nor the machine moves it. It covers the
// elements that are exactly 0 in the reference (Tq = Tk = 1: one key takes
// all the weight, dS = P(dP − Δ) = 0 and so dq = dk = 0, while the kernel
// is left with the rounding of dP − Δ), which a tolerance relative to each
// element could not. The logged ratios error/bound show how much of the
// bound the kernels use.
func TestAttentionMatchesReference(t *testing.T) {
	b := New()
	for _, pr := range attnPrecisions {
		dt := pr.dt
		var worst [5]float64
		var worstCase [5]attnCase
		for n, c := range attnCases() {
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			in := newAttnInputs(c, rng, dt)
			var want attnRun
			want.out, want.lse = refAttention(c, in)
			want.dq, want.dk, want.dv = refAttentionBackward(c, in)
			got := runAttention(b, c, in, dt, n%5)
			ratio, bad := attnCheck(c, in, pr.prec, got, want)
			if bad != "" {
				t.Errorf("%v %v: beyond the rounding-error bound: %s", dt, c, bad)
			}
			for i, r := range ratio {
				if r > worst[i] || math.IsNaN(r) {
					worst[i], worstCase[i] = r, c
				}
			}
		}
		for i, name := range attnbound.Names {
			t.Logf("%v %-3s worst error/bound %.3f (%v)", dt, name, worst[i], worstCase[i])
		}
	}
}

// TestAttentionMaskedRows: with Tq > Tk under the causal mask the first
// Tq−Tk rows see no key. They must come out as zeros with the dtype's most
// negative finite lse, and contribute nothing (and no NaN) to the
// gradients; every other element is within the rounding-error bound.
func TestAttentionMaskedRows(t *testing.T) {
	b := New()
	for _, pr := range attnPrecisions {
		dt := pr.dt
		c := attnCase{B: 1, H: 2, Hkv: 1, Tq: 5, Tk: 3, D: 8, causal: true}
		in := newAttnInputs(c, rand.New(rand.NewPCG(1, 2)), dt)
		got := runAttention(b, c, in, dt, 0)
		var want attnRun
		want.out, want.lse = refAttention(c, in)
		want.dq, want.dk, want.dv = refAttentionBackward(c, in)
		lowest := -math.MaxFloat64
		if dt == backend.Float32 {
			lowest = -math.MaxFloat32
		}
		for h := 0; h < c.H; h++ {
			for i := 0; i < 2; i++ {
				n := h*c.Tq + i
				if l := got.lse[n]; l != lowest {
					t.Errorf("%v: lse of fully masked row %d = %v, want the most negative finite value", dt, i, l)
				}
				want.lse[n] = lowest // the reference's log 0
			}
		}
		if _, bad := attnCheck(c, in, pr.prec, got, want); bad != "" {
			t.Errorf("%v: beyond the rounding-error bound: %s", dt, bad)
		}
	}
}

// TestAttentionGradientFiniteDifference checks dq, dk, dv against central
// differences of the loss L = Σ w∘out at float64, on tiny cases.
func TestAttentionGradientFiniteDifference(t *testing.T) {
	b := New()
	for _, c := range []attnCase{
		{B: 1, H: 2, Hkv: 1, Tq: 3, Tk: 5, D: 4, causal: true},
		{B: 1, H: 2, Hkv: 2, Tq: 4, Tk: 4, D: 3, causal: true},
		{B: 2, H: 2, Hkv: 1, Tq: 3, Tk: 4, D: 5, causal: false},
	} {
		in := newAttnInputs(c, rand.New(rand.NewPCG(3, 4)), backend.Float64)
		p := backend.AttentionParams{Scale: c.scale(), Causal: c.causal}
		qs, ks := []int{c.B, c.H, c.Tq, c.D}, []int{c.B, c.Hkv, c.Tk, c.D}
		loss := func() float64 {
			out := attnView(b, backend.Float64, qs, nil, 0)
			lse := attnView(b, backend.Float64, []int{c.B, c.H, c.Tq}, nil, 0)
			b.Attention(out, lse, attnView(b, backend.Float64, qs, in.q, 0),
				attnView(b, backend.Float64, ks, in.k, 0), attnView(b, backend.Float64, ks, in.v, 0), p)
			var l float64
			for i, o := range attnRead(b, out) {
				l += in.dout[i] * o // dL/dout = dout
			}
			return l
		}
		got := runAttention(b, c, in, backend.Float64, 0)
		const h = 1e-5
		var worst float64
		for _, x := range []struct {
			name       string
			param, grd []float64
		}{{"dq", in.q, got.dq}, {"dk", in.k, got.dk}, {"dv", in.v, got.dv}} {
			for i := range x.param {
				old := x.param[i]
				x.param[i] = old + h
				lp := loss()
				x.param[i] = old - h
				lm := loss()
				x.param[i] = old
				fd := (lp - lm) / (2 * h)
				d := math.Abs(fd-x.grd[i]) / math.Max(math.Abs(fd), 1)
				worst = math.Max(worst, d)
				if !(d < 1e-7) {
					t.Errorf("%v: %s[%d] = %.10f, finite difference %.10f", c, x.name, i, x.grd[i], fd)
				}
			}
		}
		t.Logf("%v: worst |analytic − finite difference| %.2e", c, worst)
	}
}

// TestAttentionDeterministic: the results do not depend on how many workers
// split the work, bit for bit.
func TestAttentionDeterministic(t *testing.T) {
	c := attnCase{B: 3, H: 4, Hkv: 2, Tq: 130, Tk: 130, D: 64, causal: true}
	in := newAttnInputs(c, rand.New(rand.NewPCG(5, 6)), backend.Float32)
	var first attnRun
	for n, workers := range []int{1, 2, 3, 8} {
		b := New()
		b.workers = workers
		got := runAttention(b, c, in, backend.Float32, 0)
		if n == 0 {
			first = got
			continue
		}
		for _, x := range [][2][]float64{{got.out, first.out}, {got.lse, first.lse},
			{got.dq, first.dq}, {got.dk, first.dk}, {got.dv, first.dv}} {
			for i := range x[0] {
				if math.Float64bits(x[0][i]) != math.Float64bits(x[1][i]) {
					t.Fatalf("%d workers: element %d = %v, 1 worker gave %v", workers, i, x[0][i], x[1][i])
				}
			}
		}
	}
}

// TestExpShifted checks the kernels' exponential against math.Exp: the
// float32 loop before rounding (through the sum it returns, one element at
// a time) and after rounding, and the float64 path.
func TestExpShifted(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var worstSum, worst32, worst64 float64
	check := func(a float64) {
		shift := rng.Float64()*20 - 10
		x32 := []float32{float32(a + shift)}
		a32 := float64(x32[0]) - shift // the argument the float32 loop sees
		want32 := math.Exp(a32)
		sum := expShifted(x32, shift)
		if a32 < -708 {
			want32 = 0
		}
		rel := func(got, want float64) float64 {
			if want == 0 {
				return math.Abs(got) / math.SmallestNonzeroFloat64
			}
			return math.Abs(got-want) / want
		}
		if a32 >= -708 {
			worstSum = math.Max(worstSum, rel(sum, want32))
			if d := rel(sum, want32); !(d < 1e-9) {
				t.Errorf("float32 exp(%v) = %v before rounding, math.Exp gives %v", a32, sum, want32)
			}
		} else if float32(sum) != 0 {
			t.Errorf("float32 exp(%v) = %v, want 0", a32, sum)
		}
		if want32 > 1e-37 { // normal float32 results: within an ulp after rounding
			d := rel(float64(x32[0]), want32)
			worst32 = math.Max(worst32, d)
			if !(d <= 0x1p-24*1.01) {
				t.Errorf("float32 exp(%v) rounds to %v, math.Exp gives %v (%.2g relative)", a32, x32[0], want32, d)
			}
		}
	}
	for i := 0; i < 1_000_000; i++ {
		check(-110 * rng.Float64()) // the float32 range of exp(s − m)
	}
	for i := 0; i < 100_000; i++ {
		check(-750 * rng.Float64())
	}
	for _, a := range []float64{0, -1e-300, 1e-7, -0.5 * math.Ln2 / 32, -math.Ln2, -87.3, -103, -708, -709, -1e300} {
		check(a)
	}
	// float64: math.Exp itself, so only the shift and the sum are at stake.
	for i := 0; i < 1000; i++ {
		a, shift := -50*rng.Float64(), rng.Float64()*20-10
		x := []float64{a + shift, a + shift}
		sum := expShifted(x, shift)
		want := math.Exp(a + shift - shift)
		d := math.Abs(x[0]-want) / want
		worst64 = math.Max(worst64, d)
		if d > 1e-15 || sum != x[0]+x[1] {
			t.Errorf("float64 exp(%v) = %v (sum %v), want %v", a, x[0], sum, want)
		}
	}
	// Special values: exp(0) is exactly 1, NaN propagates.
	if x := []float32{3}; expShifted(x, 3) != 1 || x[0] != 1 {
		t.Errorf("float32 exp(0) = %v, want 1", x[0])
	}
	if x := []float32{float32(math.NaN())}; !math.IsNaN(expShifted(x, 0)) {
		t.Errorf("float32 exp(NaN) = %v, want NaN", x[0])
	}
	t.Logf("float32 exp worst relative error %.2e before rounding, %.2e after (half an ulp is %.2e); float64 %.2e",
		worstSum, worst32, 0x1p-24, worst64)
}

// BenchmarkAttention times the float32 kernels at a small-model training
// shape. FLOPs count the matrix products only, halved for the causal mask:
// the forward does 2 (S = QKᵀ, O = PV), 4·B·H·Tq·Tk·D/2; the backward 5
// (S, dP, dQ, dK, dV), 10·B·H·Tq·Tk·D/2.
func BenchmarkAttention(bb *testing.B) {
	for _, c := range []attnCase{
		{B: 16, H: 4, Hkv: 4, Tq: 128, Tk: 128, D: 32, causal: true},
		{B: 4, H: 8, Hkv: 8, Tq: 512, Tk: 512, D: 64, causal: true},
	} {
		b := New()
		in := newAttnInputs(c, rand.New(rand.NewPCG(1, 1)), backend.Float32)
		qs, ks := []int{c.B, c.H, c.Tq, c.D}, []int{c.B, c.Hkv, c.Tk, c.D}
		dt := backend.Float32
		q, k, v := attnView(b, dt, qs, in.q, 0), attnView(b, dt, ks, in.k, 0), attnView(b, dt, ks, in.v, 0)
		dout := attnView(b, dt, qs, in.dout, 0)
		out, lse := attnView(b, dt, qs, nil, 0), attnView(b, dt, []int{c.B, c.H, c.Tq}, nil, 0)
		dq, dk, dv := attnView(b, dt, qs, nil, 0), attnView(b, dt, ks, nil, 0), attnView(b, dt, ks, nil, 0)
		p := backend.AttentionParams{Scale: c.scale(), Causal: c.causal}
		b.Attention(out, lse, q, k, v, p)
		pairs := float64(c.B*c.H*c.Tq*c.Tk*c.D) / 2
		name := fmt.Sprintf("B%d_H%d_T%d_D%d_causal", c.B, c.H, c.Tq, c.D)
		report := func(bb *testing.B, flops float64) {
			bb.ReportMetric(flops*float64(bb.N)/bb.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		bb.Run(name+"/fwd", func(bb *testing.B) {
			for bb.Loop() {
				b.Attention(out, lse, q, k, v, p)
			}
			report(bb, 4*pairs)
		})
		bb.Run(name+"/bwd", func(bb *testing.B) {
			for bb.Loop() {
				b.AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout, p)
			}
			report(bb, 10*pairs)
		})
	}
}

// TestAttentionRowStrided: q, k, v, out and dout laid out as padded
// (B, T, H, D+2) memory, seen as (B, H, T, D) views with contiguous rows,
// give bit for bit the results of contiguous operands.
func TestAttentionRowStrided(t *testing.T) {
	for _, c := range []attnCase{
		{B: 2, H: 4, Hkv: 2, Tq: 70, Tk: 70, D: 32, causal: true},
		{B: 1, H: 2, Hkv: 2, Tq: 5, Tk: 9, D: 16, causal: false},
		{B: 2, H: 3, Hkv: 1, Tq: 3, Tk: 40, D: 8, causal: true},
	} {
		for _, dt := range []backend.DType{backend.Float32, backend.Float64} {
			in := newAttnInputs(c, rand.New(rand.NewPCG(7, 8)), dt)
			b := New()
			want := runAttention(b, c, in, dt, 0)
			strided := func(shape []int, data []float64) backend.View {
				B, H, T, D := shape[0], shape[1], shape[2], shape[3]
				mem := attnView(b, dt, []int{B, T, H, D + 2}, nil, 1)
				v := backend.View{Buf: mem.Buf, Offset: mem.Offset + 1, Shape: shape,
					Strides: []int{T * H * (D + 2), D + 2, H * (D + 2), 1}}
				if data != nil {
					b.Copy(v, attnView(b, dt, shape, data, 0))
				}
				return v
			}
			qs, ks := []int{c.B, c.H, c.Tq, c.D}, []int{c.B, c.Hkv, c.Tk, c.D}
			q, k, v := strided(qs, in.q), strided(ks, in.k), strided(ks, in.v)
			dout, out := strided(qs, in.dout), strided(qs, nil)
			lse := attnView(b, dt, []int{c.B, c.H, c.Tq}, nil, 0)
			dq, dk, dv := attnView(b, dt, qs, nil, 0), attnView(b, dt, ks, nil, 0), attnView(b, dt, ks, nil, 0)
			p := backend.AttentionParams{Scale: c.scale(), Causal: c.causal}
			b.Attention(out, lse, q, k, v, p)
			b.AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout, p)
			outC := attnView(b, dt, qs, nil, 0)
			b.Copy(outC, out)
			got := attnRun{attnRead(b, outC), attnRead(b, lse), attnRead(b, dq), attnRead(b, dk), attnRead(b, dv)}
			for j, x := range [][2][]float64{{got.out, want.out}, {got.lse, want.lse},
				{got.dq, want.dq}, {got.dk, want.dk}, {got.dv, want.dv}} {
				for i := range x[1] {
					if math.Float64bits(x[0][i]) != math.Float64bits(x[1][i]) {
						t.Fatalf("%v %v: output %d element %d = %v, contiguous %v", c, dt, j, i, x[0][i], x[1][i])
					}
				}
			}
		}
	}
}
