// Package attnbound bounds, element by element, the rounding error of an
// attention forward and backward (Backend.Attention, AttentionBackward)
// computed in float32 or float64, from the inputs alone: the tolerance the
// backends' attention tests compare their results with a float64
// reference by. The bound comes from an error analysis of the
// computation, not from any implementation's measured error, so it holds
// on every machine, BLAS and exp kernel that does the arithmetic below,
// and a backend is never judged by another one.
//
// # What the implementation is assumed to do
//
// Unit roundoff u (2⁻²⁴ for float32, 2⁻⁵³ for float64), every +, −, ×
// and fma correctly rounded, γ(n) = n·u/(1 − n·u). exp, exp2, log and the
// reciprocal 1/l are within Ulps = 4 units in the last place, i.e. within
// κ = 8u relative (an ulp of a normal y is at most 2u·|y|). They are not
// correctly rounded, and 4 is a deliberate margin: the Metal kernels are
// compiled with the precise library functions (FORGE_METAL_MATH safe or
// relaxed; "fast" is outside this analysis), which the Metal Shading
// Language specification puts within a few ulps (its 2.0 table: 1 ulp for
// exp, exp2, log, 1/x correctly rounded), the emulator's glibc expf and
// logf and Go's math.Exp and math.Log are within 1, and the CPU backend's
// exp kernel is one float64 evaluation rounded once (TestExpShifted in
// forge/cpu). exp(0) = 1 exactly (C99 Annex F); a result below the smallest
// normal number may be flushed to zero (absolute error Tiny). Any order of
// summation and any blocking: a sum of n nonzero terms, however
// parenthesised, is Σ x_j(1 + θ_j) with |θ_j| ≤ γ(depth), depth ≤ n − 1
// additions plus the unary roundings (products, scalings) on x_j's path.
//
// Forward, per query row i seeing n keys (s_j = scale·q_i·k_j, m = max s,
// P_j = exp(s_j − lse), lse = log Σ exp s_j, all exact):
//
//   - score: |ŝ_j − s_j| ≤ e_j = γ(D+2)·|scale|·Σ_d |q_id||k_jd| (D products
//     and sums, the multiply by scale, the rounding of scale itself).
//   - online softmax: l = Σ_j exp(ŝ_j − m̂) may be accumulated with a
//     running maximum, rescaling the partial sum (and the output
//     accumulator) by exp(m_old − m_new) whenever the maximum grows: per key
//     (the Metal reference kernels) or per tile (the fast ones). Growth is
//     possible only at a key whose score may exceed every earlier one
//     (s_j + e_j > max_{k<j} s_k − e_k); R counts those after the first. A
//     term of l is then multiplied by at most 1 + R exponentials (its own and
//     the rescales after it; the others are exp(0) = 1 exactly) and passes
//     n − 1 + R roundings of the sum. The arguments ŝ_j − m_tile and
//     m_old − m_new, each computed (and possibly scaled by a rounded log₂e)
//     with γ(3) relative error, add up along a term's path to
//     m̂ − ŝ_j ≤ m − s_j + e_j + max e, so its exponent is off by at most
//     a_j = γ(3)·(m − s_j + e_j + max e).
//   - lse: the computed m̂ + log l̂ is lse + log Σ_j P_j·exp(δ_j)·μ_j with
//     |δ_j| ≤ e_j + a_j and μ_j within (1 ± κ)^(1+R)·(1 ± γ(n−1+R)), bounded
//     above and below exactly (E_l); then the log's κ·|log l̂| and the
//     final addition's u·|lse|.
//   - out = Σ_j P_j v_j: the score errors, common to the weighted sum and
//     l (each score is computed once per pass, by the same operations),
//     move the softmax itself: |P̃_j − P_j| ≤ P_j·(exp(e_j + C) − 1),
//     C = log Σ_k P_k exp e_k, and out by Σ_j P_j|v_jd − out_d|(exp(e_j+C) − 1)
//     (Σ_j (P̃_j − P_j) = 0). The rest — argument rounding, exp ulps, the
//     rescales, n + R + 1 roundings of the weighted sum, n − 1 + R of l, the
//     reciprocal and the final multiply — is taken independently in the
//     numerator and l (the reference kernels recompute the exponentials).
//
// Backward (each backend fed its own forward's out and lse, so their
// errors above are inputs here): Δ_i = Σ_d dO_id·out_id, off by
// Σ_d |dO_id|·e_out + γ(D+1)·Σ_d |dO_id|(|out_id| + e_out) (plain float32
// is allowed; a compensated or float64 sum does better); g_ij = dP_ij − Δ_i,
// dP_ij = Σ_d dO_id v_jd, off by e_Δ + γ(D+1)(Σ_d |dO_id||v_jd| + |Δ_i| +
// e_Δ); P_ij = exp(ŝ_ij − lse_i) with exponent error e_ij + e_lse + γ(3)
// (|s_ij − lse_i| + e_ij + e_lse), κ for the exp and Tiny for underflow;
// dS = P·g, |δdS| ≤ P·e_g + |g|·e_P + e_P·e_g + u(P + e_P)(|g| + e_g); dq
// = scale·Σ_j dS_ij k_j, dk_j = scale·Σ_(h,i) dS_ij q_i (over the query heads
// of its kv group and the N rows that see key j), dv_j = Σ_(h,i) P_ij dO_i,
// each off by the propagated Σ|δ·||·| plus γ(n+2), γ(N+2), γ(N+1) of
// Σ(|·| + δ)|·|.
//
// Every step is bounded exactly (products of (1 ± ·) factors, exp(x) − 1
// rather than x, the cross term e_P·e_g), so second-order terms are
// included, not dropped, and no constant factor is needed. The analysis
// is a worst case over the orders and blockings above: the CPU backend
// (BLAS or Go gemm, float64 row sums, no rescales), the Metal fast kernels
// (simdgroup products, per-tile rescales) and the Metal reference kernels
// (fma loops, per-key rescales) are all covered by it.
package attnbound

import (
	"fmt"
	"math"
)

// Shape is one attention call: q, out, dout (B, H, Tq, D), k, v (B, Hkv,
// Tk, D), lse (B, H, Tq); query row i sees keys 0 … Tk − Tq + i when Causal.
type Shape struct {
	B, H, Hkv, Tq, Tk, D int
	Scale                float64
	Causal               bool
}

// Precision is the arithmetic the bound is for.
type Precision struct {
	U    float64 // unit roundoff
	Tiny float64 // smallest normal number: the error of a result flushed to 0
}

// Float32 and Float64 are IEEE single and double precision.
var (
	Float32 = Precision{U: 0x1p-24, Tiny: 0x1p-126}
	Float64 = Precision{U: 0x1p-53, Tiny: 0x1p-1022}
)

// Ulps is the accuracy assumed of exp, exp2, log and 1/x, in units in the
// last place of the result (the package comment says why 4).
const Ulps = 4

// Tensors are the five outputs, contiguous: out and dq (B, H, Tq, D), lse
// (B, H, Tq), dk and dv (B, Hkv, Tk, D).
type Tensors struct{ Out, LSE, DQ, DK, DV []float64 }

// Names are the outputs' names, in the order of Tensors.
var Names = [5]string{"out", "lse", "dq", "dk", "dv"}

func (t Tensors) all() [5][]float64 { return [5][]float64{t.Out, t.LSE, t.DQ, t.DK, t.DV} }

// Tolerance is what a result computed in precision p may differ by from a
// float64 reference: Bound at p for the result, plus the reference's own
// rounding — the same quantities computed in float64, in an order the
// analysis covers, so Bound at Float64: to first order in u that is Bound
// at p scaled by 2⁻⁵³/u (exactly Bound again when p is Float64; 2⁻²⁹ of it
// for float32, where a second pass over the inputs is not worth its time).
func Tolerance(s Shape, q, k, v, dout []float64, p Precision) Tensors {
	t := Bound(s, q, k, v, dout, p)
	f := 1 + Float64.U/p.U
	for _, x := range t.all() {
		for i := range x {
			x[i] *= f
		}
	}
	return t
}

// Bound returns, element by element, a bound on |computed − exact| for the
// forward and backward computed in precision p from the inputs q, k, v and
// dout (contiguous; the shapes of Shape), by the analysis of the package
// comment. A row that sees no key has bound 0: its out, lse (the most
// negative finite value) and dq are exact.
func Bound(s Shape, q, k, v, dout []float64, p Precision) Tensors {
	B, H, Hkv, Tq, Tk, D := s.B, s.H, s.Hkv, s.Tq, s.Tk, s.D
	if Hkv <= 0 || H%Hkv != 0 {
		panic(fmt.Sprintf("attnbound: %d query heads are not a multiple of %d kv heads", H, Hkv))
	}
	G := H / Hkv
	nq, nk := B*H*Tq*D, B*Hkv*Tk*D
	if len(q) != nq || len(dout) != nq || len(k) != nk || len(v) != nk {
		panic(fmt.Sprintf("attnbound: %d, %d, %d, %d elements for q, k, v, dout of %+v", len(q), len(k), len(v), len(dout), s))
	}
	u, tiny := p.U, p.Tiny
	gamma := func(n int) float64 { return float64(n) * u / (1 - float64(n)*u) }
	kappa := 2 * Ulps * u // Ulps ulps, relative
	g3 := gamma(3)
	sc := math.Abs(s.Scale)
	gs := gamma(D+2) * sc

	t := Tensors{
		Out: make([]float64, nq), LSE: make([]float64, B*H*Tq), DQ: make([]float64, nq),
		DK: make([]float64, nk), DV: make([]float64, nk),
	}
	// Per kv row and d: Σ δdS·|q|, Σ (|dS| + δdS)|q|, Σ δP·|dO|, Σ (P + δP)|dO|;
	// per kv row: the number of (head, query) terms.
	k1, k2, v1, v2 := make([]float64, nk), make([]float64, nk), make([]float64, nk), make([]float64, nk)
	terms := make([]int, B*Hkv*Tk)

	sj, es, pj, aj := make([]float64, Tk), make([]float64, Tk), make([]float64, Tk), make([]float64, Tk)
	fj, wn := make([]float64, Tk), make([]float64, Tk)
	o, eo, num := make([]float64, D), make([]float64, D), make([]float64, D)
	dq1, dq2 := make([]float64, D), make([]float64, D)
	for b := range B {
		for h := range H {
			kvb := (b*Hkv + h/G) * Tk // first kv row of the head
			for i := range Tq {
				n := Tk
				if s.Causal {
					n = min(Tk, Tk-Tq+i+1)
				}
				row := (b*H+h)*Tq + i
				if n <= 0 {
					continue
				}
				qi, gi := q[row*D:(row+1)*D], dout[row*D:(row+1)*D]

				// Scores and their errors, the exact softmax.
				m, emax := math.Inf(-1), 0.0
				for j := range n {
					var dot, abs float64
					for d, x := range k[(kvb+j)*D : (kvb+j+1)*D] {
						dot += qi[d] * x
						abs += math.Abs(qi[d] * x)
					}
					sj[j], es[j] = s.Scale*dot, gs*abs
					m, emax = max(m, sj[j]), max(emax, es[j])
				}
				var l float64
				for j := range n {
					l += math.Exp(sj[j] - m)
				}
				lse := m + math.Log(l)
				for j := range n {
					pj[j] = math.Exp(sj[j] - lse)
				}

				// Possible growths of the running maximum after the first key.
				R, lo := 0, sj[0]-es[0]
				for j := 1; j < n; j++ {
					if sj[j]+es[j] > lo {
						R++
					}
					lo = max(lo, sj[j]-es[j])
				}
				expR := math.Pow(1+kappa, float64(1+R)) // the exps on a term's path
				gl, gout := gamma(n-1+R), gamma(n+R+1)  // roundings of l, of the weighted sum

				// lse.
				var up, dn, cs float64
				for j := range n {
					aj[j] = g3 * (m - sj[j] + es[j] + emax)
					up += pj[j] * math.Exp(es[j]+aj[j])
					dn += pj[j] * math.Exp(-es[j]-aj[j])
					cs += pj[j] * math.Exp(es[j])
				}
				el := max(math.Log(up)+math.Log(expR)+math.Log1p(gl),
					-math.Log(dn)-float64(1+R)*math.Log1p(-kappa)-math.Log1p(-gl))
				pre := el + kappa*(lse-m+emax+el)
				eLSE := pre + u*(math.Abs(lse)+pre)
				t.LSE[row] = eLSE

				// out. fj: P̃_j ≤ P_j·fj; wn: the numerator's per-term bound.
				C := math.Log(cs)
				var bbar float64 // |l̂/Z − 1|
				for j := range n {
					fj[j] = math.Exp(es[j] + C)
					w, ea := pj[j]*fj[j], math.Exp(aj[j])*expR
					bbar += w*(ea*(1+gl)-1) + 2*tiny
					wn[j] = w*(ea*(1+gout)-1) + 2*tiny
				}
				t2 := (1+kappa)*(1+u) - 1 // 1/l̂ and the multiply by it
				clear(o)
				for j := range n {
					for d, x := range v[(kvb+j)*D : (kvb+j+1)*D] {
						o[d] += pj[j] * x
					}
				}
				clear(eo)
				clear(num)
				for j := range n {
					f := pj[j] * (fj[j] - 1)
					for d, x := range v[(kvb+j)*D : (kvb+j+1)*D] {
						eo[d] += f * math.Abs(x-o[d])
						num[d] += wn[j] * math.Abs(x)
					}
				}
				var delta, edelta1, edelta2 float64
				for d := range D {
					ot := math.Abs(o[d]) + eo[d] // ≥ |õ|
					X := math.Inf(1)             // no bound: l̂ may be anything
					if bbar < 1 {
						X = (num[d] + ot*bbar) / (1 - bbar)
					}
					eo[d] += X*(1+t2) + ot*t2
					t.Out[row*D+d] = eo[d]
					delta += gi[d] * o[d]
					edelta1 += math.Abs(gi[d]) * eo[d]
					edelta2 += math.Abs(gi[d]) * (math.Abs(o[d]) + eo[d])
				}

				// Backward.
				edelta := edelta1 + gamma(D+1)*edelta2
				clear(dq1)
				clear(dq2)
				for j := range n {
					var dp, adp float64
					for d, x := range v[(kvb+j)*D : (kvb+j+1)*D] {
						dp += gi[d] * x
						adp += math.Abs(gi[d] * x)
					}
					g := dp - delta
					eg := edelta + gamma(D+1)*(adp+math.Abs(delta)+edelta)
					P := pj[j]
					x := es[j] + eLSE
					eP := P*(math.Exp(x+g3*(math.Abs(sj[j]-lse)+x))*(1+kappa)-1) + tiny
					dS := math.Abs(P * g)
					edS := P*eg + math.Abs(g)*eP + eP*eg + u*(P+eP)*(math.Abs(g)+eg)
					kv := kvb + j
					terms[kv]++
					for d, kd := range k[(kvb+j)*D : (kvb+j+1)*D] {
						dq1[d] += edS * math.Abs(kd)
						dq2[d] += (dS + edS) * math.Abs(kd)
						o := kv*D + d
						k1[o] += edS * math.Abs(qi[d])
						k2[o] += (dS + edS) * math.Abs(qi[d])
						v1[o] += eP * math.Abs(gi[d])
						v2[o] += (P + eP) * math.Abs(gi[d])
					}
				}
				for d := range D {
					t.DQ[row*D+d] = sc * (dq1[d] + gamma(n+2)*dq2[d])
				}
			}
		}
	}
	for kv, N := range terms {
		for d := range D {
			o := kv*D + d
			t.DK[o] = sc * (k1[o] + gamma(N+2)*k2[o])
			t.DV[o] = v1[o] + gamma(N+1)*v2[o]
		}
	}
	return t
}

// Check compares got with want element by element: it returns each
// output's largest |got − want| / tol, and a description of the first
// element beyond its tolerance ("" if none). Equal values (infinities
// included) differ by 0; a NaN differs by +Inf.
func Check(got, want, tol Tensors) (ratio [5]float64, bad string) {
	g, w, b := got.all(), want.all(), tol.all()
	for n := range g {
		if len(g[n]) != len(w[n]) || len(b[n]) != len(w[n]) {
			panic(fmt.Sprintf("attnbound: %s: %d elements, want %d, tolerance %d", Names[n], len(g[n]), len(w[n]), len(b[n])))
		}
		for i, x := range g[n] {
			d := 0.0
			if x != w[n][i] {
				d = math.Abs(x - w[n][i])
			}
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			r := 0.0
			if d > 0 {
				r = d / b[n][i] // +Inf for a tolerance of 0
			}
			ratio[n] = max(ratio[n], r)
			if r > 1 && bad == "" {
				bad = fmt.Sprintf("%s[%d] = %v, reference %v: off by %.3g, bound %.3g", Names[n], i, x, w[n][i], d, b[n][i])
			}
		}
	}
	return ratio, bad
}
