package cpu

// Fused scaled-dot-product attention, forward and backward.
//
// Shapes: q, out, dq, dout (B, H, Tq, D); k, v, dk, dv (B, Hkv, Tk, D);
// lse (B, H, Tq). Query head h reads key/value head h/G with G = H/Hkv
// (grouped-query attention, no copies). Causal query row i sits at absolute
// position Tk−Tq+i and sees keys 0..Tk−Tq+i, so Tq < Tk is the KV-cached
// decode case and Tq == Tk is training.
//
// The heavy products run on tiles of attnBlockQ query rows, through
// attnProduct: the AVX-512 tile kernel of attntile.go where the gemm
// kernels in use are the AVX-512 ones, else gemm (BLAS or the Go kernel);
// the row work between them (max, exp, sums, scalings, Δ, dS) runs through
// the vector primitives of rowops.go and exp.go. Kᵀ and Vᵀ are copied out
// once per kv head so that the score products are NN gemms (see
// transposeInto). For one query block (bq rows, the first
// nk keys, nk cut at the block's causal limit so fully masked key columns
// are never touched):
//
//	forward:  S = scale·Q·Kᵀ              (bq, nk)   gemm
//	          P = exp(S − m), l = ΣP      (row max m; masked entries 0)
//	          O = P·V / l                 (bq, D)    gemm
//	          lse = m + log l
//	backward: Δ = rowsum(dO∘O)            (bq)       once per row
//	          P = exp(scale·Q·Kᵀ − lse)   (bq, nk)   gemm, recomputed from lse
//	          dP − Δ = dO·Vᵀ + (−Δ)       (bq, nk)   gemm, beta 1 on rows of −Δ
//	          dS = P∘(dP − Δ)
//	          dQ = scale·dS·K             (bq, D)    gemm
//	          dK += scale·dSᵀ·Q           (nk, D)    gemm, beta 1
//	          dV += Pᵀ·dO                 (nk, D)    gemm, beta 1
//
// Scratch is per worker, (bq, Tk) at most; nothing (Tq, Tk) outlives a call
// and nothing (B, H, Tq, Tk) is ever allocated. Masking never writes -Inf:
// a masked score is simply not read, and its probability is written as 0. A
// row that sees no key at all (only possible when Tq > Tk) gets out = 0,
// lse = the dtype's most negative finite value and dq = 0.
//
// The backward is parallel over (b, kv head): the worker that owns a kv head
// runs all G query heads of its group in order, so dk and dv are written by
// one goroutine in a fixed order — deterministic, no atomics (and no
// parallelism beyond B·Hkv tasks). The forward has no shared outputs and is
// parallel over (b, h, query block). Results do not depend on the number of
// workers.
//
// Cost: the exponentials go through the vector exp kernel of exp.go (a
// fraction of a nanosecond each; a scalar Go loop took ~4 ns and was half
// the forward's time at D = 32 and D = 64 with OpenBLAS doing the products).
// On an Intel Xeon (AVX-512, 2 workers, BenchmarkAttention, GFLOP/s of the
// causal products) the tile kernel took the forward from 65 to 73 and the
// backward from 89 to 102 at B16 H4 T128 D32, and from 112 to 139 and 121
// to 155 at B4 H8 T512 D64, against OpenBLAS's SkylakeX gemm; what remains
// is the tile products (~42 %), exp (~18 %), the transposes (~8 %) and the
// row logs (~7 %).
// Query blocks of 32 rows measured best (16, 48, 64 and 128 were tried):
// larger blocks waste more of the causal diagonal block, smaller ones make
// the products too thin for BLAS.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// attnBlockQ is the number of query rows per tile.
const attnBlockQ = 32

// attnShape holds the dimensions of one attention call.
type attnShape struct {
	B, H, Hkv, G int // batch, query heads, kv heads, H/Hkv
	Tq, Tk, D    int // query length, key length, head dim
	scale        float64
	causal       bool
}

func newAttnShape(kernel string, q, k, v backend.View, p backend.AttentionParams, views ...backend.View) attnShape {
	if len(q.Shape) != 4 || len(k.Shape) != 4 || len(v.Shape) != 4 {
		panic(fmt.Sprintf("cpu: %s: q, k, v must be 4-D, got %v, %v, %v", kernel, q.Shape, k.Shape, v.Shape))
	}
	s := attnShape{
		B: q.Shape[0], H: q.Shape[1], Tq: q.Shape[2], D: q.Shape[3],
		Hkv: k.Shape[1], Tk: k.Shape[2],
		scale: p.Scale, causal: p.Causal,
	}
	if s.Hkv <= 0 || s.H%s.Hkv != 0 {
		panic(fmt.Sprintf("cpu: %s: %d query heads are not a multiple of %d kv heads", kernel, s.H, s.Hkv))
	}
	s.G = s.H / s.Hkv
	dt := q.DType()
	for _, x := range append([]backend.View{q, k, v}, views...) {
		if x.DType() != dt {
			panic(fmt.Sprintf("cpu: %s: mixed dtypes %v and %v", kernel, dt, x.DType()))
		}
	}
	return s
}

// attnMat addresses a (B, H, T, D) operand whose rows (last axis) are
// contiguous and whose other axes have any strides (backend.RowStrided
// Attention): row (b, h, t) starts at off + b·sb + h·sh + t·ld.
type attnMat[T Float] struct {
	x               []T
	off, sb, sh, ld int
}

// newAttnMat checks v (4-D, unit stride on the last axis unless it has
// one element; non-negative strides) and describes it.
func newAttnMat[T Float](kernel, name string, v backend.View) attnMat[T] {
	if len(v.Shape) != 4 {
		panic(fmt.Sprintf("cpu: %s: %s must be 4-D, got %v", kernel, name, v.Shape))
	}
	st := v.Strides
	if (st[3] != 1 && v.Shape[3] > 1) || st[0] < 0 || st[1] < 0 || st[2] < 0 {
		panic(fmt.Sprintf("cpu: %s: %s %v with strides %v: its rows must be contiguous", kernel, name, v.Shape, st))
	}
	return attnMat[T]{x: wholeFloats[T](v), off: v.Offset, sb: st[0], sh: st[1], ld: st[2]}
}

// at returns the offset of row t of head h of batch b.
func (m attnMat[T]) at(b, h, t int) int { return m.off + b*m.sb + h*m.sh + t*m.ld }

// block returns the rows [t, t+n) of head (b, h), for gemm with ld m.ld.
func (m attnMat[T]) block(b, h, t, n, d int) []T {
	o := m.at(b, h, t)
	if n == 0 {
		return m.x[o:o]
	}
	return m.x[o : o+(n-1)*m.ld+d]
}

// keys returns how many keys query row i sees: Tk, or its causal limit
// (≤ 0 when the row sees nothing).
func (s *attnShape) keys(i int) int {
	if !s.causal {
		return s.Tk
	}
	return min(s.Tk, s.Tk-s.Tq+i+1)
}

// Attention computes out = softmax(scale·q·kᵀ [causal mask])·v and the row
// log-sum-exp lse of the scaled, masked scores.
func (b *Backend) Attention(out, lse, q, k, v backend.View, p backend.AttentionParams) {
	s := newAttnShape("attention", q, k, v, p, out, lse)
	if !lse.IsContiguous() {
		panic(fmt.Sprintf("cpu: attention: lse %v must be contiguous, got strides %v", lse.Shape, lse.Strides))
	}
	const kn = "attention"
	switch q.DType() {
	case backend.Float32:
		attentionForward(b, &s, newAttnMat[float32](kn, "out", out), floats[float32](lse),
			newAttnMat[float32](kn, "q", q), newAttnMat[float32](kn, "k", k), newAttnMat[float32](kn, "v", v))
	case backend.Float64:
		attentionForward(b, &s, newAttnMat[float64](kn, "out", out), floats[float64](lse),
			newAttnMat[float64](kn, "q", q), newAttnMat[float64](kn, "k", k), newAttnMat[float64](kn, "v", v))
	default:
		panic(badDType("attention", q.DType()))
	}
}

// Attention and AttentionBackward take q, k, v, out and dout with
// contiguous rows and any other strides.
var _ = declare(backend.KernelAttentionRowStrided, computed)

// AttentionBackward writes dq, dk, dv (overwriting them) from the forward's
// inputs, its output and lse, and the upstream gradient dout.
func (b *Backend) AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout backend.View, p backend.AttentionParams) {
	s := newAttnShape("attention backward", q, k, v, p, dq, dk, dv, out, lse, dout)
	for _, x := range []backend.View{dq, dk, dv, lse} {
		if !x.IsContiguous() {
			panic(fmt.Sprintf("cpu: attention backward: dq, dk, dv and lse must be contiguous, got shape %v strides %v", x.Shape, x.Strides))
		}
	}
	const kn = "attention backward"
	switch q.DType() {
	case backend.Float32:
		attentionBackward(b, &s, floats[float32](dq), floats[float32](dk), floats[float32](dv),
			newAttnMat[float32](kn, "q", q), newAttnMat[float32](kn, "k", k), newAttnMat[float32](kn, "v", v),
			newAttnMat[float32](kn, "out", out), floats[float32](lse), newAttnMat[float32](kn, "dout", dout))
	case backend.Float64:
		attentionBackward(b, &s, floats[float64](dq), floats[float64](dk), floats[float64](dv),
			newAttnMat[float64](kn, "q", q), newAttnMat[float64](kn, "k", k), newAttnMat[float64](kn, "v", v),
			newAttnMat[float64](kn, "out", out), floats[float64](lse), newAttnMat[float64](kn, "dout", dout))
	default:
		panic(badDType("attention backward", q.DType()))
	}
}

// attentionForward: out (B,H,Tq,D), lse (B,H,Tq), q (B,H,Tq,D), k, v (B,Hkv,Tk,D).
func attentionForward[T Float](b *Backend, s *attnShape, out attnMat[T], lse []T, q, k, v attnMat[T]) {
	B, H, G, Tq, Tk, D := s.B, s.H, s.G, s.Tq, s.Tk, s.D
	if Tq == 0 {
		return
	}
	nqb := (Tq + attnBlockQ - 1) / attnBlockQ
	bq0 := min(attnBlockQ, Tq)
	cost := bq0 * max(Tk, 1) * (D + 8)
	if s.causal {
		cost /= 2
	}
	b.parallelFor(B*H*nqb, cost, func(lo, hi int) {
		sp := make([]T, bq0*Tk)     // (bq, nk) scores, then probabilities
		inv := make([]float64, bq0) // (bq) 1/l
		kt := make([]T, D*Tk)       // (D, Tk) Kᵀ of the kv head ktOf
		ktOf := -1
		for t := lo; t < hi; t++ {
			bh, qb := t/nqb, t%nqb // bh = b·H + h
			bi, h := bh/H, bh%H
			kvh := h / G
			kvo := bi*s.Hkv + kvh
			i0 := qb * attnBlockQ
			bq := min(attnBlockQ, Tq-i0)
			nk := max(s.keys(i0+bq-1), 0)     // keys the block's last row sees
			ob := out.block(bi, h, i0, bq, D) // (bq, D), ld out.ld
			lb := lse[bh*Tq+i0 : bh*Tq+i0+bq] // (bq)
			if nk == 0 || D == 0 {
				for r := range bq {
					clear(ob[r*out.ld : r*out.ld+D])
				}
				for r := range lb {
					lb[r] = attnEmptyRowLSE[T](s.keys(i0 + r))
				}
				continue
			}
			qb_ := q.block(bi, h, i0, bq, D) // (bq, D)
			vb := v.block(bi, kvh, 0, nk, D) // (nk, D)
			p := sp[:bq*nk]                  // (bq, nk)
			if ktOf != kvo {
				transposeStrided(kt, k.block(bi, kvh, 0, Tk, D), Tk, D, k.ld)
				ktOf = kvo
			}
			attnProduct(false, bq, nk, D, T(s.scale), qb_, q.ld, 1, kt, Tk, p, nk)
			for r := 0; r < bq; r++ {
				row := p[r*nk : (r+1)*nk]
				n := min(max(s.keys(i0+r), 0), nk)
				if n == 0 {
					clear(row)
					inv[r] = 0
					lb[r] = minFinite[T]()
					continue
				}
				m, l := softmaxRowUnnormalised(row, n)
				inv[r] = 1 / l
				lb[r] = T(float64(m) + math.Log(l))
			}
			attnProduct(false, bq, D, nk, 1, p, nk, 1, vb, v.ld, ob, out.ld)
			for r := 0; r < bq; r++ {
				o := ob[r*out.ld : r*out.ld+D]
				scaleRow(o, o, inv[r])
			}
		}
	})
}

// attentionBackward: dq (B,H,Tq,D), dk, dv (B,Hkv,Tk,D); the rest as in the
// forward, dout (B,H,Tq,D).
func attentionBackward[T Float](b *Backend, s *attnShape, dq, dk, dv []T, q, k, v, out attnMat[T], lse []T, dout attnMat[T]) {
	B, H, Hkv, G, Tq, Tk, D := s.B, s.H, s.Hkv, s.G, s.Tq, s.Tk, s.D
	if D == 0 {
		return // every gradient is empty
	}
	bq0 := max(min(attnBlockQ, Tq), 1)
	cost := G * Tq * max(Tk, 1) * (2*D + 8)
	if s.causal {
		cost /= 2
	}
	scale := T(s.scale)
	b.parallelFor(B*Hkv, cost, func(lo, hi int) {
		pb := make([]T, bq0*Tk) // (bq, nk) scores, then P
		ds := make([]T, bq0*Tk) // (bq, nk) dP − Δ, then dS
		kt := make([]T, D*Tk)   // (D, Tk) Kᵀ
		vt := make([]T, D*Tk)   // (D, Tk) Vᵀ
		ones := make([]T, Tk)   // scaled by −Δ to fill a row of d
		for j := range ones {
			ones[j] = 1
		}
		// Row-strided operands are packed per head into contiguous
		// scratch first: the gemms and row loops below ran ~40 % slower
		// on rows 3·H·D apart (q, k, v of a fused projection) than on
		// packed ones, and a head's rows are re-read for every query
		// block.
		var qp, op, dop, kp []T
		pack := func(m attnMat[T], bi, h, rows int, buf *[]T) attnMat[T] {
			if m.ld == D || rows <= 1 {
				return m
			}
			if *buf == nil {
				*buf = make([]T, max(Tq, Tk)*D)
			}
			x := (*buf)[:rows*D]
			for r := range rows {
				o := m.at(bi, h, r)
				copy(x[r*D:(r+1)*D], m.x[o:o+D])
			}
			return attnMat[T]{x: x, ld: D}
		}
		for t := lo; t < hi; t++ { // t = b·Hkv + kv head
			bi, kvh := t/Hkv, t%Hkv
			kvo := t * Tk * D
			dkg, dvg := dk[kvo:kvo+Tk*D], dv[kvo:kvo+Tk*D] // (Tk, D)
			clear(dkg)
			clear(dvg)
			transposeStrided(kt, k.block(bi, kvh, 0, Tk, D), Tk, D, k.ld)
			transposeStrided(vt, v.block(bi, kvh, 0, Tk, D), Tk, D, v.ld)
			k := pack(k, bi, kvh, Tk, &kp) // packed: at(·, ·, t) = t·D
			for h := kvh * G; h < (kvh+1)*G; h++ {
				bh := bi*H + h
				q, out, dout := pack(q, bi, h, Tq, &qp), pack(out, bi, h, Tq, &op), pack(dout, bi, h, Tq, &dop)
				for i0 := 0; i0 < Tq; i0 += attnBlockQ {
					bq := min(attnBlockQ, Tq-i0)
					nk := max(s.keys(i0+bq-1), 0)
					qo := (bh*Tq + i0) * D
					dqb := dq[qo : qo+bq*D] // (bq, D)
					if nk == 0 {
						clear(dqb)
						continue
					}
					qb := q.block(bi, h, i0, bq, D)     // (bq, D)
					ob := out.block(bi, h, i0, bq, D)   // (bq, D)
					dob := dout.block(bi, h, i0, bq, D) // (bq, D)
					lb := lse[bh*Tq+i0 : bh*Tq+i0+bq]
					kb := k.block(bi, kvh, 0, nk, D) // (nk, D)
					p, d := pb[:bq*nk], ds[:bq*nk]
					for r := 0; r < bq; r++ { // d = −Δ, so that the dP gemm below leaves dP − Δ
						scaleRow(d[r*nk:(r+1)*nk], ones[:nk],
							-rowDot(ob[r*out.ld:r*out.ld+D], dob[r*dout.ld:r*dout.ld+D]))
					}
					attnProduct(false, bq, nk, D, scale, qb, q.ld, 1, kt, Tk, p, nk)
					attnProduct(true, bq, nk, D, 1, dob, dout.ld, 1, vt, Tk, d, nk)
					for r := 0; r < bq; r++ {
						n := min(max(s.keys(i0+r), 0), nk)
						probsAndScoreGrad(p[r*nk:(r+1)*nk], d[r*nk:(r+1)*nk], n, float64(lb[r]))
					}
					attnProduct(false, bq, D, nk, scale, d, nk, 1, kb, k.ld, dqb, D)
					attnProduct(true, nk, D, bq, scale, d, 1, nk, qb, q.ld, dkg[:nk*D], D)
					attnProduct(true, nk, D, bq, 1, p, 1, nk, dob, dout.ld, dvg[:nk*D], D)
				}
			}
		}
	})
}

// softmaxRowUnnormalised overwrites row[:n] with exp(row[j] − m), m the
// maximum of row[:n], zeroes row[n:], and returns m and the sum l ≥ 1 of
// the exponentials (before rounding to T). n ≥ 1.
func softmaxRowUnnormalised[T Float](row []T, n int) (m T, l float64) {
	m = T(rowMax(row[:n]))
	l = expShifted(row[:n], float64(m))
	clear(row[n:])
	return m, l
}

// probsAndScoreGrad turns one row of scaled scores p and of dP − Δ (Δ =
// rowsum(dO∘O)) d into P = exp(p − lse) and dS = P∘(dP − Δ) in place, for
// the first n keys; masked entries (j ≥ n) become 0 in both.
func probsAndScoreGrad[T Float](p, d []T, n int, lse float64) {
	expShifted(p[:n], lse)
	d = d[:len(p)]
	if isF32[T]() {
		scaleMul32(asF32(d[:n]), asF32(d[:n]), asF32(p[:n]), 1)
	} else {
		for j, e := range p[:n] {
			d[j] *= e
		}
	}
	clear(p[n:])
	clear(d[n:])
}

// rowDot returns Σ_j a_j·b_j, accumulated in float64.
func rowDot[T Float](a, b []T) float64 {
	if isF32[T]() {
		return dot32(asF32(a), asF32(b))
	}
	var acc float64
	b = b[:len(a)]
	for j, x := range a {
		acc += float64(x) * float64(b[j])
	}
	return acc
}

// transposeInto writes the (cols, rows) transpose of the row-major (rows,
// cols) matrix x into t. The score products then run as NN gemms, which
// OpenBLAS does markedly faster than the NT form at these thin shapes
// (S = Q·Kᵀ for a 32-row block, D = 32: 6.8 µs NN against 10.7 µs NT per
// head); one transpose per kv head is cheap beside that.
//
// Four rows at a time: sequential reads, four-element runs of writes (half
// the time of a plain double loop).
func transposeInto[T Float](t, x []T, rows, cols int) { transposeStrided(t, x, rows, cols, cols) }

// transposeStrided is transposeInto for a source whose rows are ld apart.
func transposeStrided[T Float](t, x []T, rows, cols, ld int) {
	t = t[:rows*cols]
	i := 0
	for ; i+4 <= rows; i += 4 {
		r0 := x[i*ld : i*ld+cols]
		r1 := x[(i+1)*ld : (i+1)*ld+cols]
		r2 := x[(i+2)*ld : (i+2)*ld+cols]
		r3 := x[(i+3)*ld : (i+3)*ld+cols]
		for j := range r0 {
			d := t[j*rows+i : j*rows+i+4 : j*rows+i+4]
			d[0], d[1], d[2], d[3] = r0[j], r1[j], r2[j], r3[j]
		}
	}
	for ; i < rows; i++ {
		for j := 0; j < cols; j++ {
			t[j*rows+i] = x[i*ld+j]
		}
	}
}

// expShifted overwrites x[j] with e^(x[j] − shift) and returns the sum of
// the results before rounding to T. Arguments are ≤ 0 up to rounding (shift
// is the row maximum or the row's lse). float64 uses math.Exp (within an
// ulp); float32 the exp kernel of exp.go (float64 inside, one rounding).
func expShifted[T Float](x []T, shift float64) (sum float64) {
	if isF32[T]() {
		return expShiftSum32(asF32(x), asF32(x), shift, 1)
	}
	for j, v := range x {
		e := math.Exp(float64(v) - shift)
		x[j] = T(e)
		sum += e
	}
	return sum
}

// minFinite is the most negative finite value of T: the lse of a row that
// sees no key.
func minFinite[T Float]() T {
	if isF32[T]() {
		return T(-math.MaxFloat32)
	}
	m := -math.MaxFloat64 // a variable: the constant does not convert to float32
	return T(m)
}

// attnEmptyRowLSE is the lse of a row when D == 0 (every score 0): log of
// the number of keys it sees, or minFinite when it sees none.
func attnEmptyRowLSE[T Float](n int) T {
	if n <= 0 {
		return minFinite[T]()
	}
	return T(math.Log(float64(n)))
}
