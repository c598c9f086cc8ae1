package metal

// Attention and AttentionBackward (ops_attention.go) on the emulator
// against the CPU backend and a float64 loop: every fast-path head dim the
// issue names (and the conformance suite's), reference-path head dims,
// lengths that are not tile multiples, GQA/MQA, causal and full, decode
// shapes, row-strided operands; float16 and bfloat16 data; bit-identical
// results under every thread schedule; the dtype contract's panics.
//
// The 16-bit kernels: the fast path's four head-dim instances (including
// head dims they serve below their own), the delta preprocess, the
// reference kernels. What is checked, and the bound. They widen every
// input to float32 where they read it and compute exactly as the float32
// kernels do (float32 scores, statistics, P, dS and accumulators; P and dS
// are not rounded to the 16-bit type), rounding each output element once
// at the store. So, for inputs x16 and their float32 twin x32 (the same
// values widened), check16 (ops_layout_test.go) checks:
//
//  1. exact: on the emulator, every 16-bit output is bit for bit the
//     device's float32 kernel result on x32 rounded once (forge/half), and
//     lse is bit for bit the float32 kernel's. (On a GPU this is logged, not
//     required: its compiler may contract the two instances differently.)
//  2. bound: against the CPU backend's float32 result w on x32, a 16-bit
//     output g must satisfy |g − w| ≤ ulp16/2 + attnTol·max(1, |w|), with
//     ulp16 the format's spacing at max(|g|, |w|): the device's float32
//     result lies within attnTol·max(1, |w|) of w (the float32 tests'
//     tolerance, on inputs of the same magnitude), and rounding it once
//     moves it by at most half a unit in the last place. lse (float32) must
//     be within attnTol·max(1, |w|). For |w| in [1, 2) the bound is
//     2⁻⁸ + 1e-5 (≈ 3.9e-3) for bfloat16 and 2⁻¹¹ + 1e-5 (≈ 5e-4) for
//     float16 — far below what a skipped key block (a whole block's
//     probability mass missing from a row, ~0.1–1), a mis-indexed row or
//     column (another row's values, ~1) or a missing store (the −7.25 fill
//     left in place) produces: a kernel made to skip the second key block
//     (forward) or query block (dk/dv), or to swap two rows at the store,
//     fails it by 10³–10⁴ times.
//
// The 16-bit backward is run from the CPU's forward results, out rounded
// to the 16-bit type (the 16-bit backward takes out in that type; the
// float32 calls get the same rounded values), so only the backward
// differs.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
	"github.com/forgeml/forge/internal/attnbound"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// attnTol bounds |metal − cpu| / max(1, |cpu|) for every output (the
// conformance suite's float32 tolerance).
const attnTol = 1e-5

var (
	attnDevOnce sync.Once
	attnDev     *Backend
	attnDevErr  error
)

// attnDevice is the GPU under FORGE_BACKEND=metal (testDevice), else an
// emulated device running kernels/attention.metal alone (so these tests
// neither wait for nor depend on the other kernel files).
func attnDevice(t *testing.T) *Backend {
	t.Helper()
	if testDevice() == "metal" {
		return opsDevice(t)
	}
	attnDevOnce.Do(func() {
		src := kernels.Sources()
		drv, err := emu.Open(map[string]string{"attention.metal": src["attention.metal"]}, emu.Options{})
		if err != nil {
			attnDevErr = err
			return
		}
		attnDev = New(drv)
	})
	if attnDevErr != nil {
		skipUnavailable(t, attnDevErr)
	}
	return attnDev
}

func newAttnEnv(t *testing.T) *opsEnv {
	t.Helper()
	return &opsEnv{t: t, dev: attnDevice(t), ref: cpu.New(), rng: rand.New(rand.NewPCG(7, 8))}
}

// attnCase is one attention call.
type attnCase struct {
	B, H, Hkv, Tq, Tk, D int
	causal               bool
	scale                float64 // 0: 1/√D
	strided              bool    // q, k, v, out, dout row-strided with gaps, offsets
	bcastKV              bool    // k and v with stride 0 over their heads
}

func (c attnCase) String() string {
	s := fmt.Sprintf("B%d H%d/%d Tq%d Tk%d D%d", c.B, c.H, c.Hkv, c.Tq, c.Tk, c.D)
	if c.causal {
		s += " causal"
	} else {
		s += " full"
	}
	if c.scale != 0 {
		s += fmt.Sprintf(" scale %g", c.scale)
	}
	if c.strided {
		s += " strided"
	}
	if c.bcastKV {
		s += " bcast-kv"
	}
	return s
}

func (c attnCase) params() backend.AttentionParams {
	sc := c.scale
	if sc == 0 {
		sc = 1 / math.Sqrt(float64(max(c.D, 1)))
	}
	return backend.AttentionParams{Scale: sc, Causal: c.causal}
}

// spec returns a (b, h, t, d) view spec: contiguous, or (with
// strided) laid out as (b, t, h, d+gap) at an offset, like the heads of a
// fused projection seen through a permutation; with bcastH one head's
// rows repeated over h (stride 0).
func (c attnCase) spec(b, h, t, d, gap, off int, strided, bcastH bool) vspec {
	if !strided && !bcastH {
		return contig(b, h, t, d)
	}
	if bcastH {
		// One head's rows, repeated over h (stride 0).
		return vspec{shape: []int{b, h, t, d}, strides: []int{t * (d + gap), 0, d + gap, 1}, off: off}
	}
	row := d + gap
	return vspec{shape: []int{b, h, t, d}, strides: []int{t * h * row, row, h * row, 1}, off: off}
}

// attnData is one case's tensors on both devices, and their host values.
type attnData struct {
	c                          attnCase
	q, k, v, dout              pair
	out, lse, dq, dk, dv       pair
	hq, hk, hv, hg             []float32 // host values of q, k, v, dout
	qs, ks, vs, outSpec, gSpec vspec
}

func (e *opsEnv) attnData(c attnCase, mag float64) *attnData {
	a := &attnData{c: c}
	a.qs = c.spec(c.B, c.H, c.Tq, c.D, 3, 5, c.strided, false)
	a.ks = c.spec(c.B, c.Hkv, c.Tk, c.D, 2, 3, c.strided, c.bcastKV)
	a.vs = c.spec(c.B, c.Hkv, c.Tk, c.D, 1, 1, c.strided, c.bcastKV)
	a.outSpec = c.spec(c.B, c.H, c.Tq, c.D, 0, 2, c.strided, false)
	a.gSpec = c.spec(c.B, c.H, c.Tq, c.D, 4, 6, c.strided, false)
	host := func(s vspec) []float32 {
		h := make([]float32, max(s.extent(), 1))
		for i := range h {
			h[i] = float32(mag * e.rng.NormFloat64())
		}
		return h
	}
	from := func(h []float32) func(int) float64 { return func(i int) float64 { return float64(h[i]) } }
	nan := func(int) float64 { return math.NaN() }
	a.hq, a.hk, a.hv, a.hg = host(a.qs), host(a.ks), host(a.vs), host(a.gSpec)
	a.q = e.newPair(backend.Float32, a.qs, from(a.hq))
	a.k = e.newPair(backend.Float32, a.ks, from(a.hk))
	a.v = e.newPair(backend.Float32, a.vs, from(a.hv))
	a.dout = e.newPair(backend.Float32, a.gSpec, from(a.hg))
	a.out = e.newPair(backend.Float32, a.outSpec, nan)
	a.lse = e.newPair(backend.Float32, contig(c.B, c.H, c.Tq), nan)
	a.dq = e.newPair(backend.Float32, contig(c.B, c.H, c.Tq, c.D), nan)
	a.dk = e.newPair(backend.Float32, contig(c.B, c.Hkv, c.Tk, c.D), nan)
	a.dv = e.newPair(backend.Float32, contig(c.B, c.Hkv, c.Tk, c.D), nan)
	return a
}

// copyRef makes dst's device buffer a copy of its CPU buffer.
func (e *opsEnv) copyRef(p pair) {
	h := make([]float32, p.n)
	e.ref.Read(p.ref.Buf, h)
	e.dev.Write(p.dev.Buf, h)
}

// attnErrs are the largest scaled differences of one case's outputs.
type attnErrs struct{ out, lse, dq, dk, dv float64 }

func (w *attnErrs) max(o attnErrs) {
	w.out, w.lse = max(w.out, o.out), max(w.lse, o.lse)
	w.dq, w.dk, w.dv = max(w.dq, o.dq), max(w.dk, o.dk), max(w.dv, o.dv)
}

func (w attnErrs) String() string {
	return fmt.Sprintf("out %.1e lse %.1e dq %.1e dk %.1e dv %.1e", w.out, w.lse, w.dq, w.dk, w.dv)
}

// runAttnCase runs the forward on both devices and compares; then the
// backward on both from the CPU's forward results (so only the backward
// differs) and compares. It returns the errors and the device's times.
func (e *opsEnv) runAttnCase(c attnCase, mag float64) (errs attnErrs, fwd, bwd time.Duration) {
	e.t.Helper()
	a := e.attnData(c, mag)
	p := c.params()
	t0 := time.Now()
	e.dev.Attention(a.out.dev, a.lse.dev, a.q.dev, a.k.dev, a.v.dev, p)
	e.dev.Sync()
	fwd = time.Since(t0)
	e.ref.Attention(a.out.ref, a.lse.ref, a.q.ref, a.k.ref, a.v.ref, p)
	errs.out = e.compare(c.String()+": out", a.out, attnTol)
	errs.lse = e.compare(c.String()+": lse", a.lse, attnTol)

	e.copyRef(a.out)
	e.copyRef(a.lse)
	t0 = time.Now()
	e.dev.AttentionBackward(a.dq.dev, a.dk.dev, a.dv.dev, a.q.dev, a.k.dev, a.v.dev, a.out.dev, a.lse.dev, a.dout.dev, p)
	e.dev.Sync()
	bwd = time.Since(t0)
	e.ref.AttentionBackward(a.dq.ref, a.dk.ref, a.dv.ref, a.q.ref, a.k.ref, a.v.ref, a.out.ref, a.lse.ref, a.dout.ref, p)
	errs.dq = e.compare(c.String()+": dq", a.dq, attnTol)
	errs.dk = e.compare(c.String()+": dk", a.dk, attnTol)
	errs.dv = e.compare(c.String()+": dv", a.dv, attnTol)
	return errs, fwd, bwd
}

// attnCases covers every fast-path head dim the issue names (32, 64, 80,
// 128) and the conformance suite's (8, 16), lengths that are not tile
// multiples (1, 7, 33, 65, 100; blocks are 32 keys at D ≤ 32, else 16,
// and 8·n query rows), GQA and MQA, causal and full, decode (Tq 1–3),
// Tq > Tk, row-strided and head-broadcast operands.
func attnCases(fast bool) []attnCase {
	dims := []int{8, 16, 32, 64, 80, 128}
	if !fast {
		dims = []int{4, 12, 1, 136}
	}
	var cs []attnCase
	for _, d := range dims {
		cs = append(cs,
			attnCase{B: 1, H: 2, Hkv: 2, Tq: 7, Tk: 7, D: d, causal: true},
			attnCase{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: d, causal: true},
			attnCase{B: 2, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: d},
			attnCase{B: 1, H: 4, Hkv: 2, Tq: 3, Tk: 65, D: d, causal: true},
		)
	}
	cs = append(cs,
		attnCase{B: 1, H: 1, Hkv: 1, Tq: 1, Tk: 1, D: dims[0], causal: true},
		attnCase{B: 1, H: 1, Hkv: 1, Tq: 1, Tk: 1, D: dims[1]},
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 65, Tk: 65, D: dims[1], causal: true},
		attnCase{B: 1, H: 3, Hkv: 3, Tq: 100, Tk: 100, D: dims[0], causal: true},
		attnCase{B: 1, H: 1, Hkv: 1, Tq: 100, Tk: 100, D: dims[2]},
		attnCase{B: 2, H: 4, Hkv: 1, Tq: 1, Tk: 100, D: dims[1], causal: true},
		attnCase{B: 1, H: 2, Hkv: 2, Tq: 2, Tk: 33, D: dims[2]},
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 9, Tk: 5, D: dims[0]},                // Tq > Tk, full
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 40, Tk: 7, D: dims[0], causal: true}, // rows that see no key
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 17, Tk: 0, D: dims[1]},               // no keys at all
		attnCase{B: 2, H: 2, Hkv: 1, Tq: 0, Tk: 9, D: dims[1], causal: true},  // no queries: dk = dv = 0
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 20, Tk: 20, D: dims[1], causal: true, scale: 0.3},
		attnCase{B: 1, H: 2, Hkv: 1, Tq: 40, Tk: 46, D: dims[0], causal: true}, // Tk − Tq ≢ 0 (mod 8)
		attnCase{B: 1, H: 2, Hkv: 2, Tq: 35, Tk: 41, D: dims[3], causal: true},
		attnCase{B: 1, H: 1, Hkv: 1, Tq: 40, Tk: 41, D: dims[0], causal: true},
		attnCase{B: 1, H: 1, Hkv: 1, Tq: 35, Tk: 36, D: dims[3], causal: true},
		attnCase{B: 2, H: 4, Hkv: 2, Tq: 33, Tk: 33, D: dims[2], causal: true, strided: true},
		attnCase{B: 2, H: 2, Hkv: 2, Tq: 3, Tk: 21, D: dims[1], causal: true, strided: true},
		attnCase{B: 1, H: 4, Hkv: 2, Tq: 12, Tk: 12, D: dims[0], bcastKV: true},
	)
	return cs
}

// runAttnCases runs the cases (runAttnCase) and returns their worst
// errors, logging each.
func (e *opsEnv) runAttnCases(cases []attnCase) (worst attnErrs) {
	e.t.Helper()
	for _, c := range cases {
		errs, fwd, bwd := e.runAttnCase(c, 1)
		worst.max(errs)
		e.t.Logf("%-40s fwd %8v bwd %8v  %v", c, fwd.Round(time.Microsecond), bwd.Round(time.Microsecond), errs)
	}
	return worst
}

func TestAttentionFast(t *testing.T) {
	e := newAttnEnv(t)
	t.Logf("fast path, max scaled diff vs cpu: %v", e.runAttnCases(attnCases(true)))
}

func TestAttentionReference(t *testing.T) {
	e := newAttnEnv(t)
	worst := e.runAttnCases(attnCases(false))
	// D = 0: lse = log(keys seen), nothing else to write.
	for _, c := range []attnCase{{B: 1, H: 2, Hkv: 1, Tq: 5, Tk: 5, causal: true}, {B: 1, H: 1, Hkv: 1, Tq: 3, Tk: 4}} {
		errs, _, _ := e.runAttnCase(c, 1)
		worst.max(errs)
	}
	t.Logf("reference path, max scaled diff vs cpu: %v", worst)
}

// TestAttentionBatchSplit runs batches larger than one dispatch takes
// (split into several, each with its operands' offsets moved).
func TestAttentionBatchSplit(t *testing.T) {
	e := newAttnEnv(t)
	defer func() { attnBatchChunk = attnMaxGrid }()
	attnBatchChunk = 2
	for _, c := range []attnCase{
		{B: 5, H: 2, Hkv: 1, Tq: 9, Tk: 9, D: 8, causal: true},
		{B: 3, H: 4, Hkv: 2, Tq: 3, Tk: 17, D: 16, causal: true, strided: true},
	} {
		errs, _, _ := e.runAttnCase(c, 1)
		t.Logf("%-40s chunks of 2: %v", c, errs)
	}
}

// TestAttentionFastMatchesReference runs the fast and the reference
// kernels on the device on the same inputs.
func TestAttentionFastMatchesReference(t *testing.T) {
	e := newAttnEnv(t)
	defer naiveAttention.Store(false)
	for _, c := range []attnCase{
		{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 16, causal: true},
		{B: 1, H: 2, Hkv: 2, Tq: 3, Tk: 40, D: 64},
		{B: 1, H: 2, Hkv: 1, Tq: 20, Tk: 20, D: 40, causal: true, strided: true},
	} {
		a := e.attnData(c, 1)
		p := c.params()
		var got [2][5][]float32
		for i, naive := range []bool{false, true} {
			naiveAttention.Store(naive)
			e.dev.Attention(a.out.dev, a.lse.dev, a.q.dev, a.k.dev, a.v.dev, p)
			e.dev.AttentionBackward(a.dq.dev, a.dk.dev, a.dv.dev, a.q.dev, a.k.dev, a.v.dev, a.out.dev, a.lse.dev, a.dout.dev, p)
			for j, x := range []pair{a.out, a.lse, a.dq, a.dk, a.dv} {
				got[i][j] = make([]float32, x.n)
				e.dev.Read(x.dev.Buf, got[i][j])
			}
		}
		worst := 0.0
		for j := range got[0] {
			for n := range got[0][j] {
				g, w := float64(got[0][j][n]), float64(got[1][j][n])
				d := math.Abs(g-w) / max(1, math.Abs(w))
				if math.IsNaN(g) != math.IsNaN(w) || d > attnTol {
					t.Fatalf("%v: output %d element %d: fast %v, reference %v", c, j, n, g, w)
				}
				if !math.IsNaN(d) {
					worst = max(worst, d)
				}
			}
		}
		t.Logf("%-40s fast vs reference kernels: max scaled diff %.1e", c, worst)
	}
}

// attnRef64 computes the forward and backward in float64 straight from
// the definitions (materialising each row's probabilities).
func attnRef64(a *attnData, p backend.AttentionParams) (out, lse, dq, dk, dv []float64) {
	c := a.c
	G := c.H / c.Hkv
	at := func(h []float32, s vspec, b, hd, t, d int) float64 {
		s = s.full()
		return float64(h[s.off+b*s.strides[0]+hd*s.strides[1]+t*s.strides[2]+d*s.strides[3]])
	}
	out = make([]float64, c.B*c.H*c.Tq*c.D)
	lse = make([]float64, c.B*c.H*c.Tq)
	dq = make([]float64, len(out))
	dk = make([]float64, c.B*c.Hkv*c.Tk*c.D)
	dv = make([]float64, len(dk))
	for b := range c.B {
		for h := range c.H {
			kh := h / G
			for i := range c.Tq {
				n := c.Tk
				if p.Causal {
					n = min(c.Tk, c.Tk-c.Tq+i+1)
				}
				row := (b*c.H+h)*c.Tq + i
				if n <= 0 {
					lse[row] = -math.MaxFloat32
					continue
				}
				s := make([]float64, n)
				m := math.Inf(-1)
				for j := range n {
					for d := range c.D {
						s[j] += at(a.hq, a.qs, b, h, i, d) * at(a.hk, a.ks, b, kh, j, d)
					}
					s[j] *= p.Scale
					m = max(m, s[j])
				}
				l := 0.0
				for j := range n {
					s[j] = math.Exp(s[j] - m)
					l += s[j]
				}
				lse[row] = m + math.Log(l)
				delta := 0.0
				for d := range c.D {
					o := 0.0
					for j := range n {
						o += s[j] / l * at(a.hv, a.vs, b, kh, j, d)
					}
					out[row*c.D+d] = o
					delta += o * at(a.hg, a.gSpec, b, h, i, d)
				}
				for j := range n {
					pj := s[j] / l
					dp := 0.0
					for d := range c.D {
						dp += at(a.hg, a.gSpec, b, h, i, d) * at(a.hv, a.vs, b, kh, j, d)
					}
					ds := pj * (dp - delta) * p.Scale
					kr := ((b*c.Hkv+kh)*c.Tk + j) * c.D
					for d := range c.D {
						dq[row*c.D+d] += ds * at(a.hk, a.ks, b, kh, j, d)
						dk[kr+d] += ds * at(a.hq, a.qs, b, h, i, d)
						dv[kr+d] += pj * at(a.hg, a.gSpec, b, h, i, d)
					}
				}
			}
		}
	}
	return out, lse, dq, dk, dv
}

// gather4 returns the elements of the 4-D view s of h, contiguous, as
// float64.
func gather4(h []float32, s vspec) []float64 {
	s = s.full()
	sh, st := s.shape, s.strides
	r := make([]float64, 0, sh[0]*sh[1]*sh[2]*sh[3])
	for i0 := range sh[0] {
		for i1 := range sh[1] {
			for i2 := range sh[2] {
				for i3 := range sh[3] {
					r = append(r, float64(h[s.off+i0*st[0]+i1*st[1]+i2*st[2]+i3*st[3]]))
				}
			}
		}
	}
	return r
}

// TestAttentionFloat64 checks the device's and the CPU backend's float32
// results against float64 loops (attnRef64), each backend running its
// whole chain (its own forward's out and lse feed its backward), element
// by element within the rounding-error bound of attnbound.Tolerance: a
// worst case of float32 arithmetic in any summation order, with online
// softmax rescales and exp/log within 4 ulps, computed from the inputs —
// not from either backend's error, so the test neither depends on the
// CPU's BLAS or exp kernel nor lets one backend's error excuse the
// other's. Sharp scores (inputs ×5: scores up to ~75) are where the
// float32 rounding of the scores dominates: P = exp(s − lse) moves by
// ~1e-5 relative per ulp of such a score, which the bound carries through
// to lse, out and the gradients. The logged ratios error/bound show how
// much of it each backend uses (a worst case: typically a few per cent).
func TestAttentionFloat64(t *testing.T) {
	e := newAttnEnv(t)
	for _, tc := range []struct {
		c   attnCase
		mag float64
	}{
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 64, causal: true}, 1},
		{attnCase{B: 1, H: 2, Hkv: 2, Tq: 3, Tk: 37, D: 80, causal: true, strided: true}, 1},
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 19, Tk: 19, D: 128}, 1},
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 19, Tk: 19, D: 12, causal: true}, 1},
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 9, Tk: 9, D: 16, causal: true}, 5},
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 64}, 5},
		{attnCase{B: 1, H: 2, Hkv: 1, Tq: 17, Tk: 17, D: 12, causal: true}, 5},
		{attnCase{B: 1, H: 4, Hkv: 2, Tq: 12, Tk: 12, D: 8, bcastKV: true}, 5},
	} {
		c := tc.c
		a := e.attnData(c, tc.mag)
		p := c.params()
		var want attnbound.Tensors
		want.Out, want.LSE, want.DQ, want.DK, want.DV = attnRef64(a, p)
		tol := attnbound.Tolerance(attnbound.Shape{B: c.B, H: c.H, Hkv: c.Hkv, Tq: c.Tq, Tk: c.Tk, D: c.D, Scale: p.Scale, Causal: p.Causal},
			gather4(a.hq, a.qs), gather4(a.hk, a.ks), gather4(a.hv, a.vs), gather4(a.hg, a.gSpec), attnbound.Float32)
		for n, be := range []backend.Backend{e.dev, e.ref} {
			pick := func(x pair) backend.View {
				if n == 0 {
					return x.dev
				}
				return x.ref
			}
			be.Attention(pick(a.out), pick(a.lse), pick(a.q), pick(a.k), pick(a.v), p)
			be.AttentionBackward(pick(a.dq), pick(a.dk), pick(a.dv), pick(a.q), pick(a.k), pick(a.v), pick(a.out), pick(a.lse), pick(a.dout), p)
			read := func(x pair, s vspec) []float64 {
				h := make([]float32, x.n)
				be.Read(pick(x).Buf, h)
				return gather4(h, s)
			}
			got := attnbound.Tensors{
				Out: read(a.out, a.outSpec), LSE: read(a.lse, contig(c.B, c.H, c.Tq, 1)),
				DQ: read(a.dq, contig(c.B, c.H, c.Tq, c.D)),
				DK: read(a.dk, contig(c.B, c.Hkv, c.Tk, c.D)),
				DV: read(a.dv, contig(c.B, c.Hkv, c.Tk, c.D)),
			}
			ratio, bad := attnbound.Check(got, want, tol)
			t.Logf("%-40s inputs ×%g %-9s error/bound: out %.3f lse %.3f dq %.3f dk %.3f dv %.3f",
				c, tc.mag, be.Name(), ratio[0], ratio[1], ratio[2], ratio[3], ratio[4])
			if bad != "" {
				t.Errorf("%v inputs ×%g, %s: beyond the rounding-error bound: %s", c, tc.mag, be.Name(), bad)
			}
		}
	}
}

// TestAttentionSchedules: the kernels give bit-identical results under
// the forward, reverse and random thread orders (a missing barrier would
// make them depend on the order), and on every run (deterministic).
func TestAttentionSchedules(t *testing.T) {
	e := newAttnEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	defer naiveAttention.Store(false)
	cases := []attnCase{
		{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 16, causal: true},
		{B: 1, H: 2, Hkv: 2, Tq: 3, Tk: 40, D: 32, causal: true, strided: true},
		{B: 1, H: 1, Hkv: 1, Tq: 20, Tk: 20, D: 80},
		{B: 1, H: 2, Hkv: 1, Tq: 9, Tk: 9, D: 12, causal: true},
	}
	data := make([]*attnData, len(cases))
	for i, c := range cases {
		data[i] = e.attnData(c, 1)
	}
	run := func() [][]uint32 {
		var outs [][]uint32
		for i, c := range cases {
			a := data[i]
			p := c.params()
			e.dev.Attention(a.out.dev, a.lse.dev, a.q.dev, a.k.dev, a.v.dev, p)
			e.dev.AttentionBackward(a.dq.dev, a.dk.dev, a.dv.dev, a.q.dev, a.k.dev, a.v.dev, a.out.dev, a.lse.dev, a.dout.dev, p)
			for _, x := range []pair{a.out, a.lse, a.dq, a.dk, a.dv} {
				outs = append(outs, readBits(e.dev, x.dev.Buf, x.n))
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return fmt.Sprintf("case %v", cases[i/5]) })
}

// TestAttentionErrors: float64 is refused with the backend's message, bad
// layouts panic naming the operand, and every kernel the ops launch is
// defined in the sources.
func TestAttentionErrors(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kAttention:     func() { b.Attention(f64, f64, f64, f64, f64, backend.AttentionParams{}) },
			kAttentionBack: func() { b.AttentionBackward(f64, f64, f64, f64, f64, f64, f64, f64, f64, backend.AttentionParams{}) },
		}
	})

	e := newAttnEnv(t)
	c := attnCase{B: 1, H: 2, Hkv: 1, Tq: 4, Tk: 4, D: 8}
	a := e.attnData(c, 1)
	colMajor := a.q.dev
	colMajor.Strides = []int{64, 32, 1, 4}
	notContig := a.lse.dev
	notContig.Strides = []int{8, 1, 2}
	for name, tc := range map[string]struct {
		fn   func()
		want string
	}{
		"q with strided rows": {func() {
			e.dev.Attention(a.out.dev, a.lse.dev, colMajor, a.k.dev, a.v.dev, c.params())
		}, "q [1 2 4 8] with strides [64 32 1 4]: its rows must be contiguous"},
		"lse not contiguous": {func() {
			e.dev.Attention(a.out.dev, notContig, a.q.dev, a.k.dev, a.v.dev, c.params())
		}, "lse [1 2 4] (strides [8 1 2]) must be contiguous"},
		"heads": {func() {
			e.dev.Attention(a.out.dev, a.lse.dev, a.k.dev, a.q.dev, a.q.dev, c.params())
		}, "1 query heads are not a multiple of 2 kv heads"},
	} {
		wantPanic(t, name, tc.fn, "", tc.want)
	}

	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range attnKernelNames(backend.Float32) {
		if idx[k] != "attention.metal" {
			t.Errorf("kernel %s is not defined in kernels/attention.metal (index: %q)", k, idx[k])
		}
	}
}

// attnKernelNames returns the names of every kernel the ops launch on
// dtype dt: the delta kernel, the reference path's forward, dq and dkv,
// and the fast path's forward, dq, dk and dv at every head dim.
func attnKernelNames(dt backend.DType) []string {
	names := []string{kAttnDeltaBy[dt]}
	for _, part := range []attnPart{attnFwd, attnDQ, attnDKV} {
		names = append(names, kAttnNaiveBy[part][dt])
	}
	for _, part := range []attnPart{attnFwd, attnDQ, attnDK, attnDV} {
		for d := 8; d <= attnMaxFastD; d += 8 {
			names = append(names, kAttnFastBy[part][d/8][dt])
		}
	}
	return names
}

// attnFill is what output buffers hold before a call (exact in both
// 16-bit formats), so an element a kernel fails to store shows.
const attnFill = -7.25

// attnHalfData is one case's 16-bit tensors and their float32 twins.
type attnHalfData struct {
	c                          attnCase
	dt                         backend.DType
	q16, k16, v16, g16         pair
	q32, k32, v32, g32         pair
	qs, ks, vs, outSpec, gSpec vspec
}

func (e *opsEnv) attnHalfData(c attnCase, dt backend.DType) *attnHalfData {
	a := &attnHalfData{c: c, dt: dt}
	a.qs = c.spec(c.B, c.H, c.Tq, c.D, 3, 5, c.strided, false)
	a.ks = c.spec(c.B, c.Hkv, c.Tk, c.D, 2, 3, c.strided, c.bcastKV)
	a.vs = c.spec(c.B, c.Hkv, c.Tk, c.D, 1, 1, c.strided, c.bcastKV)
	a.outSpec = c.spec(c.B, c.H, c.Tq, c.D, 0, 2, c.strided, false)
	a.gSpec = c.spec(c.B, c.H, c.Tq, c.D, 4, 6, c.strided, false)
	a.q16, a.q32 = e.newPair16(dt, a.qs, e.normal)
	a.k16, a.k32 = e.newPair16(dt, a.ks, e.normal)
	a.v16, a.v32 = e.newPair16(dt, a.vs, e.normal)
	a.g16, a.g32 = e.newPair16(dt, a.gSpec, e.normal)
	return a
}

func attnFillGen(int) float64 { return attnFill }

// tolAttn is the float32 attention tests' tolerance, attnTol·max(1, |w|).
var tolAttn = tolScaled(attnTol)

// runAttnHalfCase runs one case's forward and backward at dtype dt and
// checks them (check16); it returns the worst results over out, dq, dk,
// dv, and lse's.
func (e *opsEnv) runAttnHalfCase(c attnCase, dt backend.DType) (w, lseW halfWorst) {
	e.t.Helper()
	a := e.attnHalfData(c, dt)
	p := c.params()
	name := fmt.Sprintf("%v %v", dt, c)

	// Forward: the 16-bit kernel, the float32 kernel on the twins, the CPU.
	out16, out32 := e.newPair16(dt, a.outSpec, attnFillGen)
	lseH := e.newPair(backend.Float32, contig(c.B, c.H, c.Tq), attnFillGen)
	lse32 := e.newPair(backend.Float32, contig(c.B, c.H, c.Tq), attnFillGen)
	e.dev.Attention(out16.dev, lseH.dev, a.q16.dev, a.k16.dev, a.v16.dev, p)
	e.dev.Attention(out32.dev, lse32.dev, a.q32.dev, a.k32.dev, a.v32.dev, p)
	e.ref.Attention(out32.ref, lse32.ref, a.q32.ref, a.k32.ref, a.v32.ref, p)
	w.add(e.check16(name+": out", out16, out32, tolAttn))
	lseW = e.check16(name+": lse", lseH, lse32, tolAttn)

	// Backward from the CPU's forward: out rounded to dt, lse as it is.
	cpuOut := make([]float32, out32.n)
	e.ref.Read(out32.ref.Buf, cpuOut)
	cpuLSE := make([]float32, lse32.n)
	e.ref.Read(lse32.ref.Buf, cpuLSE)
	outB16, outB32 := e.newPair16(dt, a.outSpec, func(i int) float64 { return float64(cpuOut[i]) })
	lseB := e.newPair(backend.Float32, contig(c.B, c.H, c.Tq), func(i int) float64 { return float64(cpuLSE[i]) })
	qd, kd := contig(c.B, c.H, c.Tq, c.D), contig(c.B, c.Hkv, c.Tk, c.D)
	dq16, dq32 := e.newPair16(dt, qd, attnFillGen)
	dk16, dk32 := e.newPair16(dt, kd, attnFillGen)
	dv16, dv32 := e.newPair16(dt, kd, attnFillGen)
	e.dev.AttentionBackward(dq16.dev, dk16.dev, dv16.dev, a.q16.dev, a.k16.dev, a.v16.dev, outB16.dev, lseB.dev, a.g16.dev, p)
	e.dev.AttentionBackward(dq32.dev, dk32.dev, dv32.dev, a.q32.dev, a.k32.dev, a.v32.dev, outB32.dev, lseB.dev, a.g32.dev, p)
	e.ref.AttentionBackward(dq32.ref, dk32.ref, dv32.ref, a.q32.ref, a.k32.ref, a.v32.ref, outB32.ref, lseB.ref, a.g32.ref, p)
	w.add(e.check16(name+": dq", dq16, dq32, tolAttn))
	w.add(e.check16(name+": dk", dk16, dk32, tolAttn))
	w.add(e.check16(name+": dv", dv16, dv32, tolAttn))
	return w, lseW
}

// attnHalfCases are the 16-bit cases: head dims 32, 64, 96 and 128 (the
// instances), 16, 40 and 80 (served by the instance above them), 12 and
// 136 (the reference kernels); lengths that are not multiples of the
// blocks (32 keys up to D = 32, else 16; 8·n query rows); GQA and MQA;
// causal and full; decode (Tq = 1); rows that see no key; no keys, no
// queries; row-strided and head-broadcast operands.
var attnHalfCases = []attnCase{
	{B: 1, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 32, causal: true},
	{B: 2, H: 2, Hkv: 1, Tq: 33, Tk: 33, D: 32},
	{B: 1, H: 2, Hkv: 1, Tq: 40, Tk: 7, D: 32, causal: true}, // rows that see no key
	{B: 1, H: 4, Hkv: 2, Tq: 3, Tk: 65, D: 64, causal: true},
	{B: 1, H: 2, Hkv: 2, Tq: 35, Tk: 41, D: 64, causal: true},
	{B: 2, H: 4, Hkv: 1, Tq: 1, Tk: 37, D: 64, causal: true}, // decode, MQA
	{B: 1, H: 2, Hkv: 1, Tq: 20, Tk: 20, D: 80, causal: true, strided: true},
	{B: 1, H: 2, Hkv: 1, Tq: 17, Tk: 17, D: 80},
	{B: 1, H: 2, Hkv: 1, Tq: 1, Tk: 20, D: 80}, // decode, full
	{B: 1, H: 2, Hkv: 1, Tq: 19, Tk: 19, D: 96, causal: true},
	{B: 1, H: 2, Hkv: 1, Tq: 19, Tk: 19, D: 128},
	{B: 1, H: 2, Hkv: 2, Tq: 9, Tk: 12, D: 128, causal: true},
	{B: 1, H: 2, Hkv: 1, Tq: 40, Tk: 46, D: 16, causal: true},
	{B: 1, H: 4, Hkv: 2, Tq: 12, Tk: 12, D: 40, bcastKV: true},
	{B: 1, H: 2, Hkv: 1, Tq: 17, Tk: 0, D: 16},              // no keys
	{B: 2, H: 2, Hkv: 1, Tq: 0, Tk: 9, D: 64, causal: true}, // no queries: dk = dv = 0
	{B: 1, H: 2, Hkv: 1, Tq: 19, Tk: 19, D: 12, causal: true},
	{B: 1, H: 4, Hkv: 2, Tq: 1, Tk: 23, D: 12, causal: true}, // decode, reference kernels
	{B: 1, H: 2, Hkv: 2, Tq: 10, Tk: 13, D: 20, causal: true, strided: true},
	{B: 1, H: 1, Hkv: 1, Tq: 5, Tk: 7, D: 136},
}

func TestAttentionHalf(t *testing.T) {
	e := newAttnEnv(t)
	for _, dt := range halfTypes {
		var worst, lseWorst halfWorst
		for _, c := range attnHalfCases {
			w, l := e.runAttnHalfCase(c, dt)
			worst.add(w)
			lseWorst.add(l)
			t.Logf("%-9v %-40s %v; lse %v", dt, c, w, l)
		}
		t.Logf("%v: out, dq, dk, dv %v; lse %v", dt, worst, lseWorst)
	}
}

// TestAttentionHalfReference runs 16-bit head dims the fast path covers on
// the reference kernels (FORGE_METAL_ATTENTION=naive), against the same
// bound.
func TestAttentionHalfReference(t *testing.T) {
	e := newAttnEnv(t)
	defer naiveAttention.Store(false)
	naiveAttention.Store(true)
	for _, dt := range halfTypes {
		for _, c := range []attnCase{
			{B: 1, H: 2, Hkv: 1, Tq: 9, Tk: 11, D: 64, causal: true},
			{B: 1, H: 2, Hkv: 2, Tq: 1, Tk: 9, D: 32},
		} {
			w, l := e.runAttnHalfCase(c, dt)
			t.Logf("%-9v %-40s reference kernels: %v; lse %v", dt, c, w, l)
		}
	}
}

// TestAttentionHalfBatchSplit runs 16-bit batches split over several
// dispatches (each moving its operands' offsets by whole batch entries; the
// strided case's operands start at odd element offsets).
func TestAttentionHalfBatchSplit(t *testing.T) {
	e := newAttnEnv(t)
	defer func() { attnBatchChunk = attnMaxGrid }()
	attnBatchChunk = 2
	for _, dt := range halfTypes {
		for _, c := range []attnCase{
			{B: 5, H: 1, Hkv: 1, Tq: 9, Tk: 9, D: 24, causal: true},
			{B: 3, H: 4, Hkv: 2, Tq: 3, Tk: 17, D: 72, causal: true, strided: true},
		} {
			w, l := e.runAttnHalfCase(c, dt)
			t.Logf("%-9v %-40s chunks of 2: %v; lse %v", dt, c, w, l)
		}
	}
}

// TestAttentionHalfSchedules: every 16-bit kernel gives bit-identical
// results under the forward, reverse and random thread orders: the fast
// path at each instance (head dims 24 → 32, 64, 80 → 96, 128), the delta
// preprocess, and the reference kernels (12), for both dtypes.
func TestAttentionHalfSchedules(t *testing.T) {
	e := newAttnEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	type run struct {
		c  attnCase
		dt backend.DType
	}
	var runs []run
	for _, dt := range halfTypes {
		for _, c := range []attnCase{
			{B: 1, H: 2, Hkv: 1, Tq: 17, Tk: 17, D: 24, causal: true},
			{B: 1, H: 2, Hkv: 2, Tq: 3, Tk: 20, D: 64, causal: true, strided: true},
			{B: 1, H: 2, Hkv: 1, Tq: 10, Tk: 10, D: 80},
			{B: 1, H: 1, Hkv: 1, Tq: 9, Tk: 9, D: 128, causal: true},
			{B: 1, H: 2, Hkv: 1, Tq: 9, Tk: 9, D: 12, causal: true},
		} {
			runs = append(runs, run{c, dt})
		}
	}
	data := make([]*attnHalfData, len(runs))
	outs := make([][5]pair, len(runs)) // out, lse, dq, dk, dv
	for i, r := range runs {
		c := r.c
		a := e.attnHalfData(c, r.dt)
		data[i] = a
		out := e.newPair(r.dt, a.outSpec, attnFillGen)
		lse := e.newPair(backend.Float32, contig(c.B, c.H, c.Tq), attnFillGen)
		dq := e.newPair(r.dt, contig(c.B, c.H, c.Tq, c.D), attnFillGen)
		dk := e.newPair(r.dt, contig(c.B, c.Hkv, c.Tk, c.D), attnFillGen)
		dv := e.newPair(r.dt, contig(c.B, c.Hkv, c.Tk, c.D), attnFillGen)
		outs[i] = [5]pair{out, lse, dq, dk, dv}
	}
	runAll := func() [][]uint32 {
		var res [][]uint32
		for i, r := range runs {
			a, o := data[i], outs[i]
			p := r.c.params()
			// The backward takes the forward's own out and lse.
			e.dev.Attention(o[0].dev, o[1].dev, a.q16.dev, a.k16.dev, a.v16.dev, p)
			e.dev.AttentionBackward(o[2].dev, o[3].dev, o[4].dev, a.q16.dev, a.k16.dev, a.v16.dev, o[0].dev, o[1].dev, a.g16.dev, p)
			for _, x := range o {
				res = append(res, readBits(e.dev, x.dev.Buf, x.n))
			}
		}
		return res
	}
	schedulesAgree(t, drv, runAll, func(i int) string {
		return fmt.Sprintf("%v %v, output %d of out, lse, dq, dk, dv", runs[i/5].dt, runs[i/5].c, i%5)
	})
}

// TestAttentionHalfErrors: mixed dtypes and a 16-bit lse panic naming the
// kernel and every dtype; the name table picks each head dim's instance;
// every 16-bit kernel the ops launch is defined in kernels/attention.metal.
func TestAttentionHalfErrors(t *testing.T) {
	e := newAttnEnv(t)
	c := attnCase{B: 1, H: 2, Hkv: 1, Tq: 4, Tk: 4, D: 8}
	h := e.attnHalfData(c, backend.Float16)
	bf := e.attnHalfData(c, backend.BFloat16)
	out16, out32 := e.newPair16(backend.Float16, h.outSpec, attnFillGen)
	lse := e.newPair(backend.Float32, contig(1, 2, 4), attnFillGen)
	lse16 := e.newPair(backend.Float16, contig(1, 2, 4), attnFillGen)
	i32 := e.newPair(backend.Int32, contig(1, 2, 4, 8), attnFillGen)
	dq := e.newPair(backend.Float16, contig(1, 2, 4, 8), attnFillGen)
	dk := e.newPair(backend.Float16, contig(1, 1, 4, 8), attnFillGen)
	dv32 := e.newPair(backend.Float32, contig(1, 1, 4, 8), attnFillGen)
	p := c.params()
	for name, tc := range map[string]struct {
		fn   func()
		want string
	}{
		"k bfloat16": {func() { e.dev.Attention(out16.dev, lse.dev, h.q16.dev, bf.k16.dev, h.v16.dev, p) },
			"metal: attention: no kernel for dtypes out float16, q float16, k bfloat16, v float16, lse float32"},
		"out float32": {func() { e.dev.Attention(out32.dev, lse.dev, h.q16.dev, h.k16.dev, h.v16.dev, p) },
			"metal: attention: no kernel for dtypes out float32, q float16, k float16, v float16, lse float32"},
		"lse float16": {func() { e.dev.Attention(out16.dev, lse16.dev, h.q16.dev, h.k16.dev, h.v16.dev, p) },
			"metal: attention: no kernel for dtypes out float16, q float16, k float16, v float16, lse float16"},
		"q int32": {func() { e.dev.Attention(out16.dev, lse.dev, i32.dev, h.k16.dev, h.v16.dev, p) },
			"metal: attention: unsupported dtype int32"},
		"dv float32": {func() {
			e.dev.AttentionBackward(dq.dev, dk.dev, dv32.dev, h.q16.dev, h.k16.dev, h.v16.dev, out16.dev, lse.dev, h.g16.dev, p)
		}, "metal: attention_backward: no kernel for dtypes dq float16, dk float16, dv float32, q float16, k float16, v float16, out float16, dout float16, lse float32"},
		"dout bfloat16": {func() {
			e.dev.AttentionBackward(dq.dev, dk.dev, dk.dev, h.q16.dev, h.k16.dev, h.v16.dev, out16.dev, lse.dev, bf.g16.dev, p)
		}, "dout bfloat16, lse float32"},
	} {
		wantPanic(t, name, tc.fn, "", tc.want)
	}

	for d, want := range map[int]int{8: 32, 24: 32, 32: 32, 40: 64, 64: 64, 72: 96, 80: 96, 96: 96, 104: 128, 128: 128} {
		for _, dt := range halfTypes {
			for part, pn := range map[attnPart]string{attnDK: "dk", attnDV: "dv"} {
				if got, w := kAttnFastBy[part][d/8][dt], fmt.Sprintf("attention_bwd_%s_d%d_%s", pn, want, dtypeTag(dt)); got != w {
					t.Errorf("head dim %d %v: kernel %s, want %s", d, dt, got, w)
				}
			}
		}
		if got, w := kAttnFastBy[attnFwd][d/8][backend.Float32], fmt.Sprintf("attention_fwd_d%d_f32", d); got != w {
			t.Errorf("head dim %d float32: kernel %s, want %s", d, got, w)
		}
	}

	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dt := range halfTypes {
		names = append(names, attnKernelNames(dt)...)
	}
	for _, k := range names {
		if idx[k] != "attention.metal" {
			t.Errorf("kernel %s is not defined in kernels/attention.metal (index: %q)", k, idx[k])
		}
	}
}
