package metal

// Attention and AttentionBackward (kernels/attention.metal): fused
// FlashAttention-2 kernels on simdgroup_float8x8 fragments for head dims
// 8, 16, …, 128, and a one-thread-per-row reference path for every other
// head dim (D % 8 ≠ 0, D > 128, D = 0), on float32, float16 or bfloat16
// data. The backward runs delta = rowsum(dout ∘ out) into a scratch
// buffer, then dq (parallel over query blocks) and dk and dv (parallel over
// key blocks, each walking the query blocks of every query head of its kv
// group, so no atomics and a fixed order: deterministic). The fast path
// computes dk and dv in two kernels, each keeping one accumulator in
// registers (a kernel holding K, V, dK and dV spills); the reference path
// in one.
//
// q, k, v, out and dout may be row-strided (backend.KernelAttentionRowStrided):
// stride 1 on D, any non-negative strides on B, H and T. lse, dq, dk and dv
// are contiguous.
//
// Dtypes: q, k, v, out (and in the backward dout, dq, dk, dv) share one
// dtype — float32, float16 or bfloat16 — and lse is float32; the delta
// scratch is float32. 16-bit data is widened to float32 where the kernels
// read it: the scores, softmax statistics, P, dS and every accumulator are
// float32 (P and dS are not rounded to the 16-bit type before they
// multiply V, K, Q or dO), and each 16-bit output element is rounded once.
// The 16-bit kernels thus do the float32 kernels' arithmetic on the widened
// inputs: their results are the float32 results rounded once. The fast
// path's 16-bit instances exist at head dims attnHalfDims only, each also
// serving the smaller multiples of 8 down to the previous one (the kernel
// reads the call's head dim), to keep the emulator's compile of
// attention.metal small; the reference kernels take a float32 scratch to
// accumulate in.

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

// Geometry of kernels/attention.metal: ATTN_SG simdgroups of 8 rows at most
// per threadgroup on the fast path, which covers head dims that are
// multiples of 8 up to attnMaxFastD; the reference kernels run
// attnNaiveThreads threads per threadgroup, one per row, and the delta
// kernel attnDeltaRows simdgroups (ATTN_DELTA_SG), one per row.
const (
	attnSG           = 4
	attnMaxFastD     = 128
	attnNaiveThreads = 64
	attnDeltaRows    = 8
	attnMaxGrid      = 65535 // threadgroups along the grid's y and z
)

// naiveAttention routes attention to the reference kernels:
// FORGE_METAL_ATTENTION=naive sets it at start-up (to rule the fast
// kernels in or out when a result looks wrong on a GPU); tests compare the
// two.
var naiveAttention atomic.Bool

func init() {
	if os.Getenv("FORGE_METAL_ATTENTION") == "naive" {
		naiveAttention.Store(true)
	}
}

const (
	kAttention     = "attention"
	kAttentionBack = "attention_backward"
)

// attnPart is a kernel part: the forward, the backward's dq, and its dk
// and dv — one kernel (attnDKV) on the reference path, two (attnDK, then
// attnDV) on the fast path.
type attnPart int

const (
	attnFwd attnPart = iota
	attnDQ
	attnDKV
	attnDK
	attnDV
	attnNParts
)

// keyRows reports whether part runs over the key rows (else the query rows).
func (part attnPart) keyRows() bool { return part >= attnDKV }

// attnHalfDims are the head dims of the fast path's float16 and bfloat16
// instances (kernels/attention.metal): a 16-bit call at head dim d runs the
// smallest one ≥ d. They keep the tile geometry of the head dims they
// serve (BK = 32 rows up to 32, else 16).
var attnHalfDims = []int{32, 64, 96, 128}

// attnFastNames returns the names of fast-path kernel part at every head
// dim d (indexed d/8, a multiple of 8 up to attnMaxFastD) by dtype.
func attnFastNames(part string) (n [attnMaxFastD/8 + 1]byDType) {
	for d := 8; d <= attnMaxFastD; d += 8 {
		for _, dt := range floatTypes {
			inst := d
			if dt != backend.Float32 {
				for i := len(attnHalfDims) - 1; i >= 0 && attnHalfDims[i] >= d; i-- {
					inst = attnHalfDims[i]
				}
			}
			n[d/8][dt] = kernels.Name("attention", part, fmt.Sprintf("d%d", inst), dtypeTag(dt))
		}
	}
	return n
}

// The kernels by dtype (attention_bwd_delta_f32, …): the delta kernel,
// the reference kernels by part, the fast-path ones by part and head dim
// (kAttnFastBy[part][d/8][dt]); an empty name where a path has no such part.
var (
	kAttnDeltaBy = namesByDType("attention", "bwd", "delta")
	kAttnNaiveBy = [attnNParts]byDType{
		attnFwd: namesByDType("attention", "naive", "fwd"),
		attnDQ:  namesByDType("attention", "naive", "dq"),
		attnDKV: namesByDType("attention", "naive", "dkv"),
	}
	kAttnFastBy = [attnNParts][attnMaxFastD/8 + 1]byDType{
		attnFwd: attnFastNames("fwd"),
		attnDQ:  attnFastNames("bwd_dq"),
		attnDK:  attnFastNames("bwd_dk"),
		attnDV:  attnFastNames("bwd_dv"),
	}
)

// attnDType checks the dtypes of one call — the data views (q, k, v, out,
// and dout, dq, dk, dv in the backward) all float32, all float16 or all
// bfloat16, lse float32 — and returns the data's dtype. names label the
// data views. Float64 gets the backend's float64 message.
func attnDType(op string, lse backend.View, names []string, data ...backend.View) backend.DType {
	checkKernelDType(op, floatTypes, lse)
	checkKernelDType(op, floatTypes, data...)
	dt := backend.Float32
	if data[0].Buf != nil {
		dt = data[0].DType()
	}
	ok := lse.Buf != nil && lse.DType() == backend.Float32
	for _, v := range data {
		ok = ok && v.Buf != nil && v.DType() == dt
	}
	if ok {
		return dt
	}
	all := make([]namedView, 0, len(data)+1)
	for i, v := range data {
		all = append(all, namedView{names[i], v})
	}
	all = append(all, namedView{"lse", lse})
	panic(fmt.Sprintf("metal: %s: no kernel for dtypes %s (want %s all float32, all float16 or all bfloat16, and lse float32)",
		op, dtypeList(all, "none"), strings.Join(names, ", ")))
}

// attnParams mirrors AttnParams in kernels/attention.metal.
type attnParams struct {
	B, H, Hkv, G  uint32
	Tq, Tk, D     uint32
	Scale         float32
	QSb, QSh, QSt uint32
	KSb, KSh, KSt uint32
	VSb, VSh, VSt uint32
	OSb, OSh, OSt uint32
	GSb, GSh, GSt uint32
}

// attnDims are the sizes of one call.
type attnDims struct {
	B, H, Hkv, G, Tq, Tk, D int
}

// attnCheck validates the shapes of q, k, v and returns the sizes.
func attnCheck(op string, q, k, v backend.View) attnDims {
	if len(q.Shape) != 4 || len(k.Shape) != 4 || len(v.Shape) != 4 {
		panic(fmt.Sprintf("metal: %s: q, k, v must be 4-D, got %v, %v, %v", op, q.Shape, k.Shape, v.Shape))
	}
	s := attnDims{B: q.Shape[0], H: q.Shape[1], Tq: q.Shape[2], D: q.Shape[3], Hkv: k.Shape[1], Tk: k.Shape[2]}
	for i := range 4 {
		if k.Shape[i] != v.Shape[i] {
			panic(fmt.Sprintf("metal: %s: k %v and v %v differ", op, k.Shape, v.Shape))
		}
	}
	if k.Shape[0] != s.B || k.Shape[3] != s.D {
		panic(fmt.Sprintf("metal: %s: k %v does not match q %v", op, k.Shape, q.Shape))
	}
	if s.Hkv <= 0 || s.H%s.Hkv != 0 {
		panic(fmt.Sprintf("metal: %s: %d query heads are not a multiple of %d kv heads", op, s.H, s.Hkv))
	}
	s.G = s.H / s.Hkv
	for _, n := range []int{s.B, s.H, s.Tq, s.Tk, s.D} {
		if n > math.MaxInt32 { // positions are int32 in the kernels
			panic(fmt.Sprintf("metal: %s: size %d beyond the kernels' 32-bit sizes", op, n))
		}
	}
	return s
}

// attnRowStrides checks that x, of the given shape, has contiguous rows and
// non-negative strides that fit uint32, and returns its (B, H, T) strides
// (0 for a dimension of size 1).
func attnRowStrides(op, name string, x backend.View, shape [4]int) (sb, sh, st uint32) {
	if len(x.Shape) != 4 || [4]int(x.Shape) != shape {
		panic(fmt.Sprintf("metal: %s: %s has shape %v, want %v", op, name, x.Shape, shape))
	}
	if x.Strides[3] != 1 && x.Shape[3] > 1 {
		panic(fmt.Sprintf("metal: %s: %s %v with strides %v: its rows must be contiguous", op, name, x.Shape, x.Strides))
	}
	var out [3]uint32
	for d := range 3 {
		s := x.Strides[d]
		if x.Shape[d] == 1 {
			s = 0
		}
		if s < 0 || s > math.MaxUint32 {
			panic(fmt.Sprintf("metal: %s: %s %v has stride %d on axis %d (want 0 … 2³²−1)", op, name, x.Shape, s, d))
		}
		out[d] = uint32(s)
	}
	return out[0], out[1], out[2]
}

// attnContiguous checks that x is contiguous with n elements.
func attnContiguous(op, name string, x backend.View, n int) {
	if !x.IsContiguous() || x.Numel() != n {
		panic(fmt.Sprintf("metal: %s: %s %v (strides %v) must be contiguous with %d elements", op, name, x.Shape, x.Strides, n))
	}
}

// params builds the kernels' parameter block; out and dout may have a nil
// Buf (not used by the kernel).
func (s attnDims) params(op string, p backend.AttentionParams, q, k, v, out, dout backend.View) attnParams {
	prm := attnParams{
		B: uint32(s.B), H: uint32(s.H), Hkv: uint32(s.Hkv), G: uint32(s.G),
		Tq: uint32(s.Tq), Tk: uint32(s.Tk), D: uint32(s.D), Scale: float32(p.Scale),
	}
	qs, ks := [4]int{s.B, s.H, s.Tq, s.D}, [4]int{s.B, s.Hkv, s.Tk, s.D}
	prm.QSb, prm.QSh, prm.QSt = attnRowStrides(op, "q", q, qs)
	prm.KSb, prm.KSh, prm.KSt = attnRowStrides(op, "k", k, ks)
	prm.VSb, prm.VSh, prm.VSt = attnRowStrides(op, "v", v, ks)
	if out.Buf != nil {
		prm.OSb, prm.OSh, prm.OSt = attnRowStrides(op, "out", out, qs)
	}
	if dout.Buf != nil {
		prm.GSb, prm.GSh, prm.GSt = attnRowStrides(op, "dout", dout, qs)
	}
	return prm
}

// fast reports whether head dim d runs on the simdgroup-matrix kernels.
func (s attnDims) fast() bool {
	return s.D%8 == 0 && s.D >= 8 && s.D <= attnMaxFastD && !naiveAttention.Load()
}

// attnGroups returns the simdgroups per threadgroup for n rows (8 each,
// at most attnSG and as many as maxThreads, the pipeline's maximum, allows)
// and the number of threadgroups that covers them.
func attnGroups(n, maxThreads int) (nsg, groups int) {
	nsg = max(1, min(attnSG, (n+7)/8, maxThreads/32))
	rows := 8 * nsg
	return nsg, (n + rows - 1) / rows
}

// attnBatchChunk is the most batch entries one fast-path dispatch takes
// (the grid's z extent; tests lower it to exercise the split).
var attnBatchChunk = attnMaxGrid

// attnAt returns x moved by n elements (a batch chunk's start).
func attnAt(x backend.View, n int) backend.View {
	if x.Buf != nil {
		x.Offset += n
	}
	return x
}

// attnViews are the views of one call (a nil Buf for those it has not).
type attnViews struct {
	q, k, v, out, dout, lse, delta, dq, dk, dv backend.View
}

// at returns the views moved to batch entry b0 of a call of sizes s and
// strides prm.
func (a attnViews) at(b0 int, s attnDims, prm attnParams) attnViews {
	rows, krows := b0*s.H*s.Tq, b0*s.Hkv*s.Tk
	a.q, a.k, a.v = attnAt(a.q, b0*int(prm.QSb)), attnAt(a.k, b0*int(prm.KSb)), attnAt(a.v, b0*int(prm.VSb))
	a.out, a.dout = attnAt(a.out, b0*int(prm.OSb)), attnAt(a.dout, b0*int(prm.GSb))
	a.lse, a.delta = attnAt(a.lse, rows), attnAt(a.delta, rows)
	a.dq, a.dk, a.dv = attnAt(a.dq, rows*s.D), attnAt(a.dk, krows*s.D), attnAt(a.dv, krows*s.D)
	return a
}

// bound returns the n views kernel part binds, in order: the fast and
// the reference kernels take the same buffers; the dk and dv kernels take
// the dq kernel's, with their output in place of dq.
func (a attnViews) bound(part attnPart) (vs [8]backend.View, n int) {
	switch part {
	case attnFwd:
		return [8]backend.View{a.out, a.lse, a.q, a.k, a.v}, 5
	case attnDQ:
		return [8]backend.View{a.dq, a.q, a.k, a.v, a.dout, a.lse, a.delta}, 7
	case attnDK:
		return [8]backend.View{a.dk, a.q, a.k, a.v, a.dout, a.lse, a.delta}, 7
	case attnDV:
		return [8]backend.View{a.dv, a.q, a.k, a.v, a.dout, a.lse, a.delta}, 7
	}
	return [8]backend.View{a.dk, a.dv, a.q, a.k, a.v, a.dout, a.lse, a.delta}, 8
}

// attnCall is one checked Attention or AttentionBackward call.
type attnCall struct {
	attnViews
	op     string        // kAttention or kAttentionBack (for panics)
	dt     backend.DType // the data's dtype
	s      attnDims
	prm    attnParams
	causal bool
	fast   bool // s.fast(), read once per call
}

// attnRun launches kernel part of call c over the query rows (forward, dq) or
// the key rows (dk, dv): on the fast path the kernel at the call's
// head dim, in chunks of at most attnBatchChunk batch entries; else the
// reference kernel, one thread per row, which for 16-bit data also takes
// float32 accumulators (a row per output row: dk's rows, then dv's).
func (b *Backend) attnRun(c *attnCall, part attnPart) {
	s := c.s
	rows, heads := s.Tq, s.H
	if part.keyRows() {
		rows, heads = s.Tk, s.Hkv
	}
	var args [10]kernelArg
	bind := func(a attnViews, prm attnParams) int {
		vs, n := a.bound(part)
		for i := range n {
			args[i] = b.arg(vs[i])
		}
		args[n] = bytesArg(prm)
		return n + 1
	}
	if !c.fast {
		name := kAttnNaiveBy[part][c.dt]
		total := s.B * heads * rows
		n := bind(c.attnViews, c.prm)
		if c.dt != backend.Float32 {
			nacc := max(total*s.D, 1)
			if part == attnDKV {
				nacc = max(2*total*s.D, 1)
			}
			acc := b.Alloc(backend.Float32, nacc)
			defer b.Free(acc) // reused only after the command buffer completes
			args[n] = b.arg(backend.View{Buf: acc, Shape: []int{nacc}, Strides: []int{1}})
			n++
		}
		b.run(name, pkey(name, cBool(0, c.causal)), rowGrid((total+attnNaiveThreads-1)/attnNaiveThreads),
			[3]int{attnNaiveThreads, 1, 1}, args[:n]...)
		return
	}
	if s.H > attnMaxGrid {
		panic(fmt.Sprintf("metal: %s: %d heads, more than the grid's %d", c.op, s.H, attnMaxGrid))
	}
	name := kAttnFastBy[part][s.D/8][c.dt]
	key := pkey(name, cBool(0, c.causal))
	pipe := b.pipelineFor(key)
	nsg, nblocks := attnGroups(rows, pipe.MaxThreads())
	for b0 := 0; b0 < s.B; b0 += attnBatchChunk {
		prm := c.prm
		nb := min(attnBatchChunk, s.B-b0)
		prm.B = uint32(nb)
		n := bind(c.at(b0, s, c.prm), prm)
		b.runPipe(name, key, pipe, [3]int{nblocks, heads, nb}, [3]int{32 * nsg, 1, 1}, args[:n]...)
	}
}

// Attention computes out = softmax(scale·q·kᵀ [causal mask])·v and the row
// log-sum-exp lse of the scaled, masked scores: q, k, v and out float32,
// float16 or bfloat16 (one dtype), lse float32, float32 arithmetic.
func (b *Backend) Attention(out, lse, q, k, v backend.View, p backend.AttentionParams) {
	dt := attnDType(kAttention, lse, []string{"out", "q", "k", "v"}, out, q, k, v)
	s := attnCheck(kAttention, q, k, v)
	prm := s.params(kAttention, p, q, k, v, out, backend.View{})
	attnContiguous(kAttention, "lse", lse, s.B*s.H*s.Tq)
	if s.B*s.H*s.Tq == 0 {
		return
	}
	b.attnRun(&attnCall{attnViews: attnViews{q: q, k: k, v: v, out: out, lse: lse},
		op: kAttention, dt: dt, s: s, prm: prm, causal: p.Causal, fast: s.fast()}, attnFwd)
}

// AttentionBackward writes dq, dk and dv (overwriting them) from the
// forward's inputs, its output and lse, and the upstream gradient dout:
// q, k, v, out, dout, dq, dk and dv float32, float16 or bfloat16 (one
// dtype), lse float32, float32 arithmetic.
func (b *Backend) AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout backend.View, p backend.AttentionParams) {
	dt := attnDType(kAttentionBack, lse, []string{"dq", "dk", "dv", "q", "k", "v", "out", "dout"}, dq, dk, dv, q, k, v, out, dout)
	s := attnCheck(kAttentionBack, q, k, v)
	prm := s.params(kAttentionBack, p, q, k, v, out, dout)
	qn, kn := s.B*s.H*s.Tq, s.B*s.Hkv*s.Tk
	attnContiguous(kAttentionBack, "lse", lse, qn)
	attnContiguous(kAttentionBack, "dq", dq, qn*s.D)
	attnContiguous(kAttentionBack, "dk", dk, kn*s.D)
	attnContiguous(kAttentionBack, "dv", dv, kn*s.D)
	if s.D == 0 || (qn == 0 && kn == 0) {
		return // every gradient is empty
	}
	c := &attnCall{attnViews: attnViews{q: q, k: k, v: v, out: out, dout: dout, lse: lse, dq: dq, dk: dk, dv: dv},
		op: kAttentionBack, dt: dt, s: s, prm: prm, causal: p.Causal, fast: s.fast()}
	if qn > 0 {
		// delta = rowsum(dout ∘ out), one float per query row (none without
		// query rows: then dk = dv = 0).
		buf := b.Alloc(backend.Float32, qn)
		defer b.Free(buf) // reused only after the command buffer completes
		c.delta = backend.View{Buf: buf, Shape: []int{qn}, Strides: []int{1}}
		name := kAttnDeltaBy[dt]
		dkey := pkey(name)
		dpipe := b.pipelineFor(dkey)
		rows := max(1, min(attnDeltaRows, dpipe.MaxThreads()/32)) // one simdgroup a row
		b.runPipe(name, dkey, dpipe, rowGrid((qn+rows-1)/rows), [3]int{32 * rows, 1, 1},
			b.arg(c.delta), b.arg(out), b.arg(dout), bytesArg(prm))
		b.attnRun(c, attnDQ)
	}
	if kn > 0 && c.fast {
		b.attnRun(c, attnDK)
		b.attnRun(c, attnDV)
	} else if kn > 0 {
		b.attnRun(c, attnDKV)
	}
}
