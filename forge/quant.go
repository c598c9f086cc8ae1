package forge

import "math"

// Fake quantisation for quantisation-aware training (QAT).
//
// A quantiser maps a weight w to integer levels r and a scale s; the
// fake-quantised weight is q = r·s, still a float tensor, so the rest of
// the model computes as before on weights that take only the values a
// quantised model can hold. Two quantisers:
//
//	int8     per row (over the last axis: an (out, in) weight's output
//	         channel): a = max|w| over the row, clamped below at 1e-8 so an
//	         all-zero (fully pruned) row gives levels 0; s = a/127;
//	         r = round(clamp(w/s, −127, 127)).
//	ternary  BitNet b1.58's absmean over the whole tensor:
//	         s = mean|w| + 1e-5; r = round(clamp(w/s, −1, 1)) ∈ {−1, 0, +1}.
//
// round is Round: halves to even (torch.round). Clamping before rounding
// equals clamping after, the bounds being integers. Every step is one
// correctly rounded float operation (|·|, max, a division, a clamp, rint,
// a product), so int8's levels, scales and q are exact functions of w,
// bit for bit equal on every backend whose division is correctly rounded
// (the CPU; Metal's emulator) and to PyTorch's float32 arithmetic. The
// ternary scale is a mean: its sum is the backend's reduction, whose order
// differs between backends (and from PyTorch's) in the last bits.
const (
	QuantNone    = "none"    // no quantisation (also "")
	QuantInt8    = "int8"    // per-row absmax, 255 levels
	QuantTernary = "ternary" // absmean, levels −1, 0, +1

	// QuantInt8Levels is int8's largest level: levels lie in [−127, 127].
	QuantInt8Levels = 127
	// QuantInt8MinAbsMax is the floor of a row's max|w| (zero rows).
	QuantInt8MinAbsMax = 1e-8
	// QuantTernaryEps is added to mean|w| (an all-zero weight).
	QuantTernaryEps = 1e-5
)

// ValidQuant reports whether mode names a quantiser ("" and "none" mean
// none).
func ValidQuant(mode string) bool {
	switch mode {
	case "", QuantNone, QuantInt8, QuantTernary:
		return true
	}
	return false
}

// Quantize returns w's integer levels (w's shape and dtype, integer
// values) and scales under mode: int8 scales have w's shape with the last
// axis 1 (one per row), the ternary scale is 0-d. Nothing is recorded for
// autograd. It panics on "none" or an unknown mode.
func Quantize(w *Tensor, mode string) (levels, scale *Tensor) {
	sameFloat("quantize", w)
	if w.Dim() == 0 {
		panic(errorf("quantize", "needs at least one axis, got a 0-d tensor"))
	}
	NoGrad(func() {
		switch mode {
		case QuantInt8:
			a := w.Abs().MaxKeep(-1).Clamp(QuantInt8MinAbsMax, math.Inf(1)) // (…, 1)
			scale = a.Div(FullLike(a, QuantInt8Levels))
			levels = w.Div(scale).Clamp(-QuantInt8Levels, QuantInt8Levels).Round()
		case QuantTernary:
			scale = w.Abs().Mean().AddScalar(QuantTernaryEps) // ()
			levels = w.Div(scale).Clamp(-1, 1).Round()
		default:
			panic(errorf("quantize", "mode %q: want %q or %q", mode, QuantInt8, QuantTernary))
		}
	})
	return levels, scale
}

// FakeQuant returns the fake-quantised w: levels·scale from Quantize,
// exactly (the product is the only rounding after the levels), with a
// straight-through gradient: the backward pass hands the gradient of the
// result to w unchanged, as if the quantiser were the identity (BitNet's
// and PyTorch's w + (q − w).detach(), without that expression's rounding:
// in float, w + (q − w) is not always q). Mode "" or "none" returns w.
func FakeQuant(w *Tensor, mode string) *Tensor {
	if mode == "" || mode == QuantNone {
		return w
	}
	var q *Tensor
	NoGrad(func() {
		r, s := Quantize(w, mode)
		q = r.Mul(s)
	})
	q = record(q, "fake_quant."+mode, []*Tensor{w}, func(g *Tensor) []*Tensor {
		return []*Tensor{g}
	})
	if q.node != nil {
		q.node.passOwned = true // g itself: the weight may keep it as its Grad
	}
	return q
}
