package cpu

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// Fused cross-entropy over logits (N, V) and Int32 targets (N), as in
// llm.c's fused classifier: the forward reads each row once, keeping an
// online max and sum of exponentials, and saves the row log-sum-exp; the
// backward rebuilds softmax from it, so the probabilities are never stored.
// Rows whose target equals ignore have loss 0 and gradient 0.

// ceBlock is the run of logits whose max is taken before their exponentials
// are summed: the running sum is rescaled at most once per block. A block
// stays in L1 between its two passes and is long enough to keep the exp
// kernel's per-call cost small.
const ceBlock = 256

// CrossEntropy writes loss (N), −log softmax(logits)[target] or 0 where
// target == ignore, and lse (N), the log-sum-exp of every row.
func (b *Backend) CrossEntropy(loss, lse, logits, targets backend.View, ignore int) {
	checkFloat("cross_entropy", logits.DType(), loss, lse)
	n, v := rowDims(logits)
	tg := ceTargets("cross_entropy", targets, n, v, ignore)
	if logits.DType() == backend.Float32 {
		crossEntropyRows[float32](b, loss, lse, logits, tg, n, v, ignore)
	} else {
		crossEntropyRows[float64](b, loss, lse, logits, tg, n, v, ignore)
	}
}

// ceTargets returns the n targets, checked on the calling goroutine so that
// a bad one panics where forge.Try can recover it.
func ceTargets(kernel string, targets backend.View, n, v, ignore int) []int32 {
	tg := indexList(kernel, targets)
	if len(tg) < n {
		panic(fmt.Sprintf("cpu: %s: %d targets for %d rows", kernel, len(tg), n))
	}
	tg = tg[:n]
	for _, t := range tg {
		if int(t) != ignore && (t < 0 || int(t) >= v) {
			panic(fmt.Sprintf("cpu: %s: target %d out of range [0, %d)", kernel, t, v))
		}
	}
	return tg
}

func crossEntropyRows[T Float](b *Backend, loss, lse, logits backend.View, tg []int32, n, v, ignore int) {
	xs := floats[T](logits)[:n*v]                         // (N, V)
	ls, es := optFloats[T](loss, n), optFloats[T](lse, n) // (N) or nil
	b.parallelRows(n, expCost*v, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			l, e := crossEntropyForward(xs[r*v:(r+1)*v], int(tg[r]), ignore)
			if ls != nil {
				ls[r] = T(l)
			}
			if es != nil {
				es[r] = T(e)
			}
		}
	})
}

// crossEntropyForward computes one row, x (V), target t:
//
//	m = max_j x_j,  ls = log Σ_j exp(x_j − m)
//	lse = m + ls,  loss = (m − x[t]) + ls  (0 when t == ignore)
//
// The loss is formed from m − x[t] rather than lse − x[t], so a confident
// prediction's small loss keeps its precision when the logits are large.
// A row holding NaN or +Inf, or only −Inf, gives NaN as in PyTorch.
func crossEntropyForward[T Float](x []T, t, ignore int) (loss, lse float64) {
	m, ls := onlineLogSumExp(x)
	if t == ignore {
		return 0, m + ls
	}
	return (m - float64(x[t])) + ls, m + ls
}

// onlineLogSumExp reads x once and returns its max m and ls =
// log Σ_j exp(x_j − m): it keeps a running max and s = Σ exp(x_j − m), and
// rescales s by exp(m_old − m_new) whenever a block of ceBlock values
// raises the max.
func onlineLogSumExp[T Float](x []T) (m, ls float64) {
	m, s := math.Inf(-1), 0.0
	for lo := 0; lo < len(x); lo += ceBlock {
		blk := x[lo:min(lo+ceBlock, len(x))]
		if bm := rowMax(blk); bm > m {
			s *= math.Exp(m - bm)
			m = bm
		}
		s += sumExpShift(blk, m)
	}
	return m, math.Log(s)
}

// CrossEntropyBackward writes dlogits = scale·(softmax(logits) −
// onehot(target)) from the saved lse, zero rows where target == ignore.
// dlogits may be logits itself (the in-place update of llm.c).
func (b *Backend) CrossEntropyBackward(dlogits, logits, lse, targets, g backend.View, ignore int, scale float64) {
	checkFloat("cross_entropy_backward", logits.DType(), dlogits, lse)
	if g.Buf != nil {
		checkFloat("cross_entropy_backward", logits.DType(), g)
		scale *= upstreamValue(g)
	}
	n, v := rowDims(logits)
	tg := ceTargets("cross_entropy_backward", targets, n, v, ignore)
	if logits.DType() == backend.Float32 {
		crossEntropyBackwardRows[float32](b, dlogits, logits, lse, tg, n, v, ignore, scale, 0x1p-25)
	} else {
		crossEntropyBackwardRows[float64](b, dlogits, logits, lse, tg, n, v, ignore, scale, 0x1p-54)
	}
}

// crossEntropyBackwardRows runs crossEntropyBackward over the rows; halfUlp
// is half the relative spacing of T.
func crossEntropyBackwardRows[T Float](b *Backend, dlogits, logits, lse backend.View, tg []int32, n, v, ignore int, scale, halfUlp float64) {
	xs, ds := floats[T](logits)[:n*v], floats[T](dlogits)[:n*v] // (N, V)
	es := floats[T](lse)[:n]                                    // (N)
	b.parallelRows(n, expCost*v, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr := ds[r*v : (r+1)*v]
			if int(tg[r]) == ignore {
				clear(dr)
				continue
			}
			crossEntropyBackward(dr, xs[r*v:(r+1)*v], float64(es[r]), int(tg[r]), scale, halfUlp)
		}
	})
}

// crossEntropyBackward differentiates one row, dl and x (V), target t:
//
//	e_j = exp(x_j − lse),  S = Σ_j e_j,  dl_j = scale·(e_j/S − [j = t])
//
// With the exact lse, S = 1. The saved lse is rounded to T, though, which
// for float32 shifts every e_j by the factor S = exp(lse_true − lse) ≈ 1 ±
// 6e-8·|lse|. The pass that writes scale·e_j also sums S, so the row is
// renormalised by a second, cheap pass over the just-written (cached) row
// when S differs from 1 by more than half an ulp of T; and the target's
// entry, where 1 − p can cancel to nearly nothing for a confident
// prediction, is formed last as e_t/S − 1 in float64. The result is the
// softmax gradient of the logits themselves, exact to T's rounding, for any
// logit magnitude. x[t] is read before the row is written, so dl may alias
// x.
func crossEntropyBackward[T Float](dl, x []T, lse float64, t int, scale, halfUlp float64) {
	xt := float64(x[t])
	s := expShiftScale(dl, x, lse, scale)
	if !(s > 0 && s < math.Inf(1)) { // NaN logits or an inconsistent lse
		dl[t] = T(scale * (math.Exp(xt-lse) - 1))
		return
	}
	if math.Abs(s-1) > halfUlp {
		scaleRow(dl, dl, 1/s)
	}
	dl[t] = T(scale * (math.Exp(xt-lse)/s - 1))
}

// upstreamValue is the one element of the view g (float32 or float64).
func upstreamValue(g backend.View) float64 {
	if g.Numel() != 1 {
		panic(fmt.Sprintf("cpu: cross_entropy_backward: upstream gradient %v must hold one element", g.Shape))
	}
	if g.DType() == backend.Float32 {
		return float64(f32(g)[0])
	}
	return f64(g)[0]
}
