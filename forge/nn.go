package forge

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// Shape letters: N rows, C channels, B batch, H heads, T time, D head
// dimension, V vocabulary.

// lastAxisRows returns t contiguous with its last axis as rows: (N, C).
func lastAxisRows(t *Tensor) (*Tensor, int, int) {
	t = t.Contiguous()
	c := 1
	if t.Dim() > 0 {
		c = t.shape[t.Dim()-1]
	}
	return t, t.Numel() / max(c, 1), c
}

// Softmax returns softmax over axis.
func (t *Tensor) Softmax(axis int) *Tensor { return t.softmax("softmax", axis, false) }

// LogSoftmax returns log(softmax) over axis, computed stably.
func (t *Tensor) LogSoftmax(axis int) *Tensor { return t.softmax("log_softmax", axis, true) }

func (t *Tensor) softmax(op string, axis int, log bool) *Tensor {
	sameFloat(op, t)
	a := t.axis(op, axis)
	if last := t.Dim() - 1; a != last {
		return t.Transpose(a, last).softmax(op, last, log).Transpose(a, last)
	}
	if !t.dev.Supports(backend.KernelSoftmax, t.dtype) {
		return softmaxComposed(t, log)
	}
	x, _, _ := lastAxisRows(t)
	y := newTensor(t.dev, t.dtype, t.shape)
	launch(t.dev, kcall{in: tensors(x), out: tensors(y), name: op, dt: t.dtype, shapes: shapesOf(x, y), bytes: bytesOf(x, y), flops: 4 * int64(x.Numel())},
		func(b backend.Backend) { b.Softmax(y.bv(), x.bv(), log) })
	return record(y, op, []*Tensor{x}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		dx := newTensor(g.dev, g.dtype, g.shape)
		launch(g.dev, kcall{in: tensors(y, g), out: tensors(dx), name: op + ".backward", dt: g.dtype, shapes: shapesOf(y, g, dx), bytes: bytesOf(y, g, dx), flops: 4 * int64(g.Numel())},
			func(b backend.Backend) { b.SoftmaxBackward(dx.bv(), y.bv(), g.bv(), log) })
		return []*Tensor{dx}
	})
}

// checkNormWeight panics unless w is nil or a 1-D float tensor of length c
// on x's device (normDTypes checks how the dtypes combine).
func checkNormWeight(op, what string, x, w *Tensor, c int) {
	if w == nil {
		return
	}
	if w.Dim() != 1 || w.shape[0] != c {
		panic(errorf(op, "%s must have shape [%d] to match input %v, got %v", what, c, x.shape, w.shape))
	}
	sameDevice(op, x, w)
	if !w.dtype.IsFloat() {
		panic(errorf(op, "%s must be a float tensor, got %v %v", what, w.dtype, w.shape))
	}
}

// normDTypes panics unless the input x, the output dtype y and the
// weights ws (nil allowed) are one float dtype, or a mix of Float32 and one
// 16-bit dtype with the weights Float32 or that dtype (a float32 residual
// normalised into a bfloat16 activation, say). It returns the dtype of the
// statistics the backward keeps: Float32 when a 16-bit dtype is involved.
func normDTypes(op string, x *Tensor, y DType, ws ...*Tensor) DType {
	if !x.dtype.IsFloat() || !y.IsFloat() {
		panic(errorf(op, "needs float tensors, got input %v %v and output dtype %v; convert with Cast(forge.Float32)", x.dtype, x.shape, y))
	}
	var h DType // the one 16-bit dtype, if any
	for _, dt := range append([]DType{x.dtype, y}, dtypesOf(ws)...) {
		if dt.IsHalf() {
			if h.IsHalf() && dt != h {
				panic(errorf(op, "mixes %v and %v; use one 16-bit dtype (with float32 where wanted)", h, dt))
			}
			h = dt
		}
	}
	ok := func(dt DType) bool {
		if h.IsHalf() {
			return dt == h || dt == Float32
		}
		return dt == x.dtype
	}
	if !ok(x.dtype) {
		panic(errorf(op, "input %v %v with %v: a 16-bit norm takes float32 or %v tensors; Cast the input to forge.Float32", x.dtype, x.shape, h, h))
	}
	if !ok(y) {
		panic(errorf(op, "output dtype %v differs from input %v %v; convert with Cast", y, x.dtype, x.shape))
	}
	for i, w := range ws {
		if w != nil && !ok(w.dtype) {
			panic(errorf(op, "%s %v %v does not match input %v %v; convert one with Cast", [2]string{"weight", "bias"}[min(i, 1)], w.dtype, w.shape, x.dtype, x.shape))
		}
	}
	if h.IsHalf() {
		return Float32
	}
	return x.dtype
}

// dtypesOf returns the dtypes of the non-nil tensors of ts.
func dtypesOf(ts []*Tensor) []DType {
	var dts []DType
	for _, t := range ts {
		if t != nil {
			dts = append(dts, t.dtype)
		}
	}
	return dts
}

// statDType is the dtype of the statistics (row log-sum-exp, norms'
// mean and rstd, per-row losses) kept for a computation in dt: Float32 for
// the 16-bit dtypes, which accumulate in float32, else dt.
func statDType(dt DType) DType {
	if dt.IsHalf() {
		return Float32
	}
	return dt
}

// normKernel reports whether x's device runs the norm kernel on every
// dtype involved: x's, the output's dt and the weights'.
func normKernel(kernel string, x *Tensor, dt DType, ws ...*Tensor) bool {
	for _, d := range append([]DType{x.dtype, dt}, dtypesOf(ws)...) {
		if !x.dev.Supports(kernel, d) {
			return false
		}
	}
	return true
}

// optView returns t's backend view, or a view with a nil buffer for nil.
func optView(t *Tensor) backend.View {
	if t == nil {
		return backend.View{}
	}
	return t.Contiguous().bv()
}

// LayerNorm normalises over the last axis: (x−mean)/√(var+eps)·w + b, with
// the biased variance. w and b (shape [C]) may be nil. The result has x's
// dtype; a 16-bit x may take float32 weights (statistics in float32).
func LayerNorm(x, w, b *Tensor, eps float64) *Tensor { return LayerNormAs(x.dtype, x, w, b, eps) }

// LayerNormAs is LayerNorm with the result stored as dt: a float32 x may be
// normalised straight into a Float16 or BFloat16 activation (and a 16-bit
// x into float32), arithmetic in float32, without a separate cast. The
// gradient reaching x has x's dtype, the weights' gradients theirs.
func LayerNormAs(dt DType, x, w, b *Tensor, eps float64) *Tensor {
	const op = "layer_norm"
	if x.Dim() == 0 {
		panic(errorf(op, "needs at least one axis, got a scalar"))
	}
	xr, n, c := lastAxisRows(x)
	checkNormWeight(op, "weight", x, w, c)
	checkNormWeight(op, "bias", x, b, c)
	st := normDTypes(op, x, dt, w, b)
	if !normKernel(backend.KernelLayerNorm, x, dt, w, b) {
		return layerNormComposed(dt, st, x, w, b, eps)
	}
	if w != nil {
		w = w.Contiguous()
	}
	if b != nil {
		b = b.Contiguous()
	}
	y := newTensor(x.dev, dt, x.shape)
	mean := newTensor(x.dev, st, []int{n})
	rstd := newTensor(x.dev, st, []int{n})
	launch(x.dev, kcall{in: tensors(xr, w, b), out: tensors(y, mean, rstd), name: op, dt: x.dtype, shapes: shapesOf(xr, y), bytes: bytesOf(xr, y), flops: 8 * int64(xr.Numel())},
		func(be backend.Backend) {
			be.LayerNorm(y.bv(), mean.bv(), rstd.bv(), xr.bv(), optView(w), optView(b), eps)
		})
	return record(y, op, []*Tensor{xr, w, b}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		dx := newTensor(g.dev, xr.dtype, g.shape)
		var dw, db *Tensor
		if w != nil && w.requiresGrad {
			dw = newTensor(g.dev, w.dtype, w.shape)
		}
		if b != nil && b.requiresGrad {
			db = newTensor(g.dev, b.dtype, b.shape)
		}
		launch(g.dev, kcall{in: tensors(xr, g, w, mean, rstd), out: tensors(dx, dw, db), name: op + ".backward", dt: g.dtype, shapes: shapesOf(xr, g, dx), bytes: bytesOf(xr, g, dx), flops: 10 * int64(g.Numel())},
			func(be backend.Backend) {
				be.LayerNormBackward(dx.bv(), optView(dw), optView(db), g.bv(), xr.bv(), optView(w), mean.bv(), rstd.bv())
			})
		return []*Tensor{dx, dw, db}
	})
}

// RMSNorm normalises over the last axis: x/√(mean(x²)+eps)·w; w (shape
// [C]) may be nil. The result has x's dtype; a 16-bit x may take a float32
// weight (statistics in float32).
func RMSNorm(x, w *Tensor, eps float64) *Tensor { return RMSNormAs(x.dtype, x, w, eps) }

// RMSNormAs is RMSNorm with the result stored as dt (see LayerNormAs).
func RMSNormAs(dt DType, x, w *Tensor, eps float64) *Tensor {
	const op = "rms_norm"
	if x.Dim() == 0 {
		panic(errorf(op, "needs at least one axis, got a scalar"))
	}
	xr, n, c := lastAxisRows(x)
	checkNormWeight(op, "weight", x, w, c)
	st := normDTypes(op, x, dt, w)
	if !normKernel(backend.KernelRMSNorm, x, dt, w) {
		return rmsNormComposed(dt, st, x, w, eps)
	}
	if w != nil {
		w = w.Contiguous()
	}
	y := newTensor(x.dev, dt, x.shape)
	rstd := newTensor(x.dev, st, []int{n})
	launch(x.dev, kcall{in: tensors(xr, w), out: tensors(y, rstd), name: op, dt: x.dtype, shapes: shapesOf(xr, y), bytes: bytesOf(xr, y), flops: 4 * int64(xr.Numel())},
		func(be backend.Backend) { be.RMSNorm(y.bv(), rstd.bv(), xr.bv(), optView(w), eps) })
	return record(y, op, []*Tensor{xr, w}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		dx := newTensor(g.dev, xr.dtype, g.shape)
		var dw *Tensor
		if w != nil && w.requiresGrad {
			dw = newTensor(g.dev, w.dtype, w.shape)
		}
		launch(g.dev, kcall{in: tensors(xr, g, w, rstd), out: tensors(dx, dw), name: op + ".backward", dt: g.dtype, shapes: shapesOf(xr, g, dx), bytes: bytesOf(xr, g, dx), flops: 8 * int64(g.Numel())},
			func(be backend.Backend) {
				be.RMSNormBackward(dx.bv(), optView(dw), g.bv(), xr.bv(), optView(w), rstd.bv())
			})
		return []*Tensor{dx, dw}
	})
}

// Embedding looks up rows of table (V, C) for int32 ids of any shape,
// giving shape (ids…, C). The gradient is summed into the table
// deterministically.
func Embedding(ids, table *Tensor) *Tensor {
	if table.Dim() != 2 {
		panic(errorf("embedding", "table must be 2-D (V, C), got %v", table.shape))
	}
	sameDevice("embedding", table, ids)
	checkIndices("embedding", ids, table.shape[0], table.shape)
	out := table.indexSelect(0, ids.Reshape(-1)) // ids checked above
	return out.Reshape(append(shapeOf(ids.shape), table.shape[1])...)
}

// RoPE applies rotary position embeddings to x (…, T, D), D even:
// interleaved pairs (x[2k], x[2k+1]) of position pos0+t rotate by angle
// (pos0+t)·θ^(−2k/D) with θ = 10000 (GPT-J convention). pos0 is the
// position of the first row, for KV-cached decoding.
func RoPE(x *Tensor, pos0 int) *Tensor { return RoPETheta(x, pos0, 10000) }

// RoPETheta is RoPE with base θ.
func RoPETheta(x *Tensor, pos0 int, theta float64) *Tensor {
	sameFloat("rope", x)
	if x.Dim() < 2 || x.shape[x.Dim()-1]%2 != 0 {
		panic(errorf("rope", "input must be (…, T, D) with D even, got %v", x.shape))
	}
	if pos0 < 0 {
		panic(errorf("rope", "position offset must be non-negative, got %d", pos0))
	}
	if !x.dev.Supports(backend.KernelRoPE, x.dtype) {
		return ropeComposed(x, pos0, theta)
	}
	t, d := x.shape[x.Dim()-2], x.shape[x.Dim()-1]
	n := x.Numel() / max(t*d, 1)
	// A backend with a strided RoPE reads a view whose rows are contiguous
	// (q or k of a fused QKV projection) where it lies, without a copy.
	strided := x.dev.Supports(backend.KernelRoPEStrided, x.dtype) && !x.IsContiguous() && (x.strides[x.Dim()-1] == 1 || d == 1)
	xc := x
	if !strided {
		xc = x.Contiguous()
	}
	rope := func(src *Tensor, inverse bool) *Tensor {
		y := newTensor(src.dev, src.dtype, src.shape)
		name := "rope"
		if inverse {
			name = "rope.backward"
		}
		launch(src.dev, kcall{in: tensors(src), out: tensors(y), name: name, dt: src.dtype, shapes: shapesOf(src, y), bytes: bytesOf(src, y), flops: 6 * int64(src.Numel())},
			func(be backend.Backend) {
				yv := y.view([]int{n, t, d}, backend.ContiguousStrides([]int{n, t, d}), 0).bv()
				if !src.IsContiguous() {
					be.RoPEStrided(y.bv(), src.bv(), pos0, theta, inverse)
					return
				}
				be.RoPE(yv, src.view([]int{n, t, d}, backend.ContiguousStrides([]int{n, t, d}), src.offset).bv(), pos0, theta, inverse)
			})
		return y
	}
	y := rope(xc, false)
	return record(y, "rope", []*Tensor{xc}, func(g *Tensor) []*Tensor { return []*Tensor{rope(g.Contiguous(), true)} })
}

// Attention is fused scaled-dot-product attention softmax(q·kᵀ·scale)·v
// with scale 1/√D, causal or not. q is (B, H, Tq, D); k and v are
// (B, Hkv, Tk, D) with H a multiple of Hkv (grouped-query attention: query
// head h reads key/value head h/(H/Hkv)). With causal, query i sits at
// position Tk−Tq+i and sees keys up to it (Tq < Tk is a KV-cached decode).
//
// Float16 or BFloat16 q, k, v compute in float32 and store the output in
// their dtype. The forward keeps only the output and the row log-sum-exp
// (B, H, Tq; float32 for 16-bit inputs); the backward recomputes the
// probabilities from them (FlashAttention-2), so no (B, H, Tq, Tk) tensor
// is ever stored.
func Attention(q, k, v *Tensor, causal bool) *Tensor {
	if q.Dim() != 4 {
		panic(errorf("attention", "q must be (B, H, Tq, D), got %v", q.shape))
	}
	return AttentionScaled(q, k, v, causal, 1/math.Sqrt(float64(q.shape[3])))
}

// AttentionScaled is Attention with an explicit scale.
func AttentionScaled(q, k, v *Tensor, causal bool, scale float64) *Tensor {
	sameFloat("attention", q, k, v)
	if q.Dim() != 4 || k.Dim() != 4 || v.Dim() != 4 {
		panic(errorf("attention", "q, k, v must be 4-D (B, H, T, D), got %v, %v, %v", q.shape, k.shape, v.shape))
	}
	b, h, tq, d := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	hkv, tk := k.shape[1], k.shape[2]
	if !equalShape(k.shape, v.shape) || k.shape[0] != b || k.shape[3] != d {
		panic(errorf("attention", "k and v must be (B, Hkv, Tk, D) matching q %v, got k %v, v %v", q.shape, k.shape, v.shape))
	}
	if hkv == 0 || h%hkv != 0 {
		panic(errorf("attention", "query heads %d must be a multiple of key/value heads %d (q %v, k %v)", h, hkv, q.shape, k.shape))
	}
	if causal && tq > tk {
		panic(errorf("attention", "causal attention needs Tq ≤ Tk, got q %v, k %v", q.shape, k.shape))
	}
	if !q.dev.Supports(backend.KernelAttention, q.dtype) {
		return attentionComposed(q, k, v, causal, scale)
	}
	// A backend that takes row-strided operands reads q, k, v where they
	// lie (heads of a fused QKV projection) and writes out laid out as
	// (B, Tq, H, D), so that out.Transpose(1, 2) — how attention's output
	// is usually consumed — is contiguous; its gradient then arrives
	// row-strided too.
	strided := q.dev.Supports(backend.KernelAttentionRowStrided, q.dtype)
	operand := func(x *Tensor) *Tensor {
		if strided && rowStrided(x) {
			return x
		}
		return x.Contiguous()
	}
	q, k, v = operand(q), operand(k), operand(v)
	p := backend.AttentionParams{Scale: scale, Causal: causal}
	var out *Tensor
	if strided {
		out = newTensor(q.dev, q.dtype, []int{b, tq, h, d}).Transpose(1, 2)
	} else {
		out = newTensor(q.dev, q.dtype, q.shape)
	}
	lse := newTensor(q.dev, statDType(q.dtype), []int{b, h, tq})
	flops := 4 * int64(b*h) * int64(tq) * int64(tk) * int64(d)
	if causal {
		flops /= 2
	}
	launch(q.dev, kcall{in: tensors(q, k, v), out: tensors(out, lse), name: "attention", dt: q.dtype, shapes: shapesOf(q, k, v, out), bytes: bytesOf(q, k, v, out, lse), flops: flops},
		func(be backend.Backend) { be.Attention(out.bv(), lse.bv(), q.bv(), k.bv(), v.bv(), p) })
	return record(out, "attention", []*Tensor{q, k, v}, func(g *Tensor) []*Tensor {
		g = operand(g)
		dq := newTensor(g.dev, g.dtype, q.shape)
		dk := newTensor(g.dev, g.dtype, k.shape)
		dv := newTensor(g.dev, g.dtype, v.shape)
		launch(g.dev, kcall{in: tensors(q, k, v, out, lse, g), out: tensors(dq, dk, dv), name: "attention.backward", dt: g.dtype, shapes: shapesOf(q, k, v, g), bytes: bytesOf(q, k, v, out, lse, g, dq, dk, dv), flops: flops * 5 / 2},
			func(be backend.Backend) {
				be.AttentionBackward(dq.bv(), dk.bv(), dv.bv(), q.bv(), k.bv(), v.bv(), out.bv(), lse.bv(), g.bv(), p)
			})
		return []*Tensor{dq, dk, dv}
	})
}

// rowStrided reports whether x (4-D) has contiguous rows (stride 1 on its
// last axis) and non-negative strides elsewhere, non-overlapping rows
// within each (B, H) matrix.
func rowStrided(x *Tensor) bool {
	st := x.strides
	d := x.shape[3]
	return (st[3] == 1 || d <= 1) && st[0] >= 0 && st[1] >= 0 && (st[2] >= d || x.shape[2] <= 1)
}

// CrossEntropy returns the mean over non-ignored rows of
// −log softmax(logits)[target]: logits (…, V), targets int32 (…). Rows whose
// target equals ignoreIndex count neither in the sum nor in the mean (all
// rows ignored gives NaN, as in PyTorch). The softmax is never stored: the
// backward recomputes it from the saved row log-sum-exp. Float16 or
// BFloat16 logits give a float32 loss (computed in float32) and a logit
// gradient in their own dtype.
func CrossEntropy(logits, targets *Tensor, ignoreIndex int) *Tensor {
	sameFloat("cross_entropy", logits)
	if logits.Dim() < 1 || targets.dtype != Int32 || !equalShape(targets.shape, logits.shape[:logits.Dim()-1]) {
		panic(errorf("cross_entropy", "needs logits (…, V) and int32 targets (…): got logits %v %v, targets %v %v",
			logits.dtype, logits.shape, targets.dtype, targets.shape))
	}
	sameDevice("cross_entropy", logits, targets)
	x, n, vocab := lastAxisRows(logits)
	tg := targets.Contiguous()
	count := 0
	ids := tg.Int32s()
	for i, id := range ids {
		if int(id) == ignoreIndex {
			continue
		}
		if id < 0 || int(id) >= vocab {
			panic(errorf("cross_entropy", "target %d at position %d out of range [0, %d) (logits %v)", id, i, vocab, logits.shape))
		}
		count++
	}
	if !x.dev.Supports(backend.KernelCrossEntropy, x.dtype) {
		return crossEntropyComposed(x.Reshape(n, vocab), ids, ignoreIndex, count)
	}
	rowLoss := newTensor(x.dev, statDType(x.dtype), []int{n})
	lse := newTensor(x.dev, statDType(x.dtype), []int{n})
	x2 := x.view([]int{n, vocab}, []int{vocab, 1}, x.offset)
	tg1 := tg.view([]int{n}, []int{1}, tg.offset)
	launch(x.dev, kcall{in: tensors(x2, tg1), out: tensors(rowLoss, lse), name: "cross_entropy", dt: x.dtype, shapes: shapesOf(x2, tg1), bytes: bytesOf(x2, tg1, rowLoss, lse), flops: 3 * int64(x.Numel())},
		func(be backend.Backend) { be.CrossEntropy(rowLoss.bv(), lse.bv(), x2.bv(), tg1.bv(), ignoreIndex) })
	var loss *Tensor
	NoGrad(func() { loss = rowLoss.Sum().MulScalar(1 / float64(count)) })
	return record(loss, "cross_entropy", []*Tensor{x}, func(g *Tensor) []*Tensor {
		// g, the loss's gradient, stays where it is: the kernel reads it
		// (a queueing device never waits for it).
		g = g.Contiguous()
		dx := newTensor(g.dev, x.dtype, x.shape)
		dx2 := dx.view([]int{n, vocab}, []int{vocab, 1}, 0)
		launch(g.dev, kcall{in: tensors(x2, tg1, lse, g), out: tensors(dx2), name: "cross_entropy.backward", dt: x.dtype, shapes: shapesOf(x2, tg1, dx2), bytes: bytesOf(x2, tg1, lse, dx2), flops: 3 * int64(x.Numel())},
			func(be backend.Backend) {
				be.CrossEntropyBackward(dx2.bv(), x2.bv(), lse.bv(), tg1.bv(), g.bv(), ignoreIndex, 1/float64(count))
			})
		return []*Tensor{dx}
	})
}

// Dropout zeroes each element with probability p and scales the rest by
// 1/(1−p), using gen (the default generator if nil). The mask is drawn on
// the host, so a seed gives the same mask on every backend. p = 0 returns x.
func Dropout(x *Tensor, p float64, gen *Generator) *Tensor {
	sameFloat("dropout", x)
	if p < 0 || p >= 1 || math.IsNaN(p) {
		panic(errorf("dropout", "probability must be in [0, 1), got %v", p))
	}
	if p == 0 {
		return x
	}
	if gen == nil {
		gen = defaultGen
	}
	keep := 1 / (1 - p)
	m := make([]float64, x.Numel())
	for i := range m {
		if gen.Float64() >= p {
			m[i] = keep
		}
	}
	mask := fromFloat64s("dropout", x.dtype, m, x.shape)
	if mask.dev != x.dev {
		mask = mask.To(x.dev)
	}
	return x.Mul(mask)
}
