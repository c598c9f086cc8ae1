package metal

// Attention and AttentionBackward on float16 and bfloat16 data (the
// emulator, or the GPU under FORGE_BACKEND=metal): every 16-bit kernel —
// the fast path's four head-dim instances (including head dims they serve
// below their own), the delta preprocess, the reference kernels — causal
// and full, GQA/MQA, lengths that are not tile multiples, decode shapes,
// row-strided operands; bit-identical results under every thread schedule;
// the dtype contract's panics.
//
// What is checked, and the bound. The 16-bit kernels widen every input to
// float32 where they read it and compute exactly as the float32 kernels do
// (float32 scores, statistics, P, dS and accumulators; P and dS are not
// rounded to the 16-bit type), rounding each output element once at the
// store. So, for inputs x16 and their float32 twin x32 (the same values
// widened), check16 (ops_half_test.go) checks:
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
// The backward is run from the CPU's forward results, out rounded to the
// 16-bit type (the 16-bit backward takes out in that type; the float32
// calls get the same rounded values), so only the backward differs.

import (
	"fmt"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

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
			if got, w := kAttnFastBy[attnDKV][d/8][dt], fmt.Sprintf("attention_bwd_dkv_d%d_%s", want, dtypeTag(dt)); got != w {
				t.Errorf("head dim %d %v: kernel %s, want %s", d, dt, got, w)
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
		names = append(names, kAttnDeltaBy[dt])
		for part := range attnNParts {
			names = append(names, kAttnNaiveBy[part][dt])
			for d := 8; d <= attnMaxFastD; d += 8 {
				names = append(names, kAttnFastBy[part][d/8][dt])
			}
		}
	}
	for _, k := range names {
		if idx[k] != "attention.metal" {
			t.Errorf("kernel %s is not defined in kernels/attention.metal (index: %q)", k, idx[k])
		}
	}
}
