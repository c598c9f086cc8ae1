package forge

// The compositions of the optional kernels (backend.OptionalKernels):
// what an op computes on a device whose capability table does not list
// its kernel, built from the required kernels (fill, copy, unary, binary,
// where, reduce, matmul, index) through the public ops, so that autograd
// differentiates them and a new backend trains a model once it has those.
// Each computes in the statistics dtype (float32 for 16-bit inputs, as
// the kernels do) and rounds to the op's output dtype once at the end.
// TestComposed (forgetest) holds each to the references the kernels meet.

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// softmaxComposed is softmax (or log-softmax) over the last axis of x.
func softmaxComposed(x *Tensor, log bool) *Tensor {
	xf := x.Cast(statDType(x.dtype))
	var m *Tensor
	NoGrad(func() { m = xf.MaxKeep(x.Dim() - 1) }) // a shift: carries no gradient
	z := xf.Sub(m)
	var y *Tensor
	if log {
		y = z.Sub(z.Exp().SumKeep(x.Dim() - 1).Log())
	} else {
		e := z.Exp()
		y = e.Div(e.SumKeep(x.Dim() - 1))
	}
	return y.Cast(x.dtype)
}

// layerNormComposed is LayerNormAs(dt, x, w, b, eps), statistics in st.
func layerNormComposed(dt, st DType, x, w, b *Tensor, eps float64) *Tensor {
	last := x.Dim() - 1
	xf := x.Cast(st)
	xc := xf.Sub(xf.MeanKeep(last))
	y := xc.Mul(xc.Square().MeanKeep(last).AddScalar(eps).Rsqrt())
	if w != nil {
		y = y.Mul(w.Cast(st))
	}
	if b != nil {
		y = y.Add(b.Cast(st))
	}
	return y.Cast(dt)
}

// rmsNormComposed is RMSNormAs(dt, x, w, eps), statistics in st.
func rmsNormComposed(dt, st DType, x, w *Tensor, eps float64) *Tensor {
	xf := x.Cast(st)
	y := xf.Mul(xf.Square().MeanKeep(x.Dim() - 1).AddScalar(eps).Rsqrt())
	if w != nil {
		y = y.Mul(w.Cast(st))
	}
	return y.Cast(dt)
}

// ropeComposed is RoPETheta(x, pos0, theta): each pair (x₂ₖ, x₂ₖ₊₁) at
// row t rotated by (pos0+t)·θ^(−2k/D), the angles' cosines and sines
// computed in float64 on the host.
func ropeComposed(x *Tensor, pos0 int, theta float64) *Tensor {
	r := x.Dim()
	t, d := x.shape[r-2], x.shape[r-1]
	st := statDType(x.dtype)
	cos, sin := make([]float64, t*d/2), make([]float64, t*d/2)
	for i := range t {
		for k := range d / 2 {
			a := float64(pos0+i) * math.Pow(theta, -float64(2*k)/float64(d))
			cos[i*d/2+k], sin[i*d/2+k] = math.Cos(a), math.Sin(a)
		}
	}
	table := func(v []float64) *Tensor { return hostTable(x.dev, st, v, t, d/2) }
	c, s := table(cos), table(sin)
	pairs := x.Cast(st).Reshape(append(shapeOf(x.shape[:r-1]), d/2, 2)...)
	x0, x1 := pairs.Index(r, 0), pairs.Index(r, 1)
	y0 := x0.Mul(c).Sub(x1.Mul(s))
	y1 := x0.Mul(s).Add(x1.Mul(c))
	return Stack(r, y0, y1).Reshape(x.shape...).Cast(x.dtype)
}

// hostTable is a tensor of dtype dt (Float32 or Float64) on dev holding v.
func hostTable(dev *Device, dt DType, v []float64, shape ...int) *Tensor {
	if dt == Float64 {
		return FromSlice(v, shape...).To(dev)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return FromSlice(f, shape...).To(dev)
}

// attentionComposed is AttentionScaled(q, k, v, causal, scale) as the
// products and the softmax it fuses: each key/value head repeated for its
// H/Hkv query heads, the (B, H, Tq, Tk) scores materialised.
func attentionComposed(q, k, v *Tensor, causal bool, scale float64) *Tensor {
	st := statDType(q.dtype)
	b, h, tq, d := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	hkv, tk := k.shape[1], k.shape[2]
	qf, kf, vf := q.Cast(st), k.Cast(st), v.Cast(st)
	if g := h / hkv; g > 1 {
		repeat := func(x *Tensor) *Tensor { return x.Unsqueeze(2).Expand(b, hkv, g, tk, d).Reshape(b, h, tk, d) }
		kf, vf = repeat(kf), repeat(vf)
	}
	s := qf.MatMul(kf.Transpose(2, 3)).MulScalar(scale)
	if causal {
		// Query i, at position Tk−Tq+i, sees keys 0..Tk−Tq+i.
		mask := make([]float64, tq*tk)
		for i := range tq {
			for j := 0; j <= tk-tq+i; j++ {
				mask[i*tk+j] = 1
			}
		}
		s = Where(hostTable(q.dev, st, mask, tq, tk), s, fullOn("full", q.dev, st, nil, math.Inf(-1)))
	}
	return s.Softmax(3).MatMul(vf).Cast(q.dtype)
}

// crossEntropyComposed is the mean of −log softmax(x)[target] over the
// count rows of x (N, V) whose target (ids, read on the host) is not
// ignore: the log-softmax gathered at the targets, ignored rows masked.
func crossEntropyComposed(x *Tensor, ids []int32, ignore, count int) *Tensor {
	st := statDType(x.dtype)
	n := x.shape[0]
	safe := make([]int32, n)
	keep := make([]float64, n)
	for i, id := range ids {
		if int(id) != ignore {
			safe[i], keep[i] = id, 1
		}
	}
	idx := FromSlice(safe, n, 1).To(x.dev)
	picked := x.Cast(st).LogSoftmax(1).Gather(1, idx).Reshape(n)
	sum := picked.Mul(hostTable(x.dev, st, keep, n)).Sum()
	if count == 0 {
		// Every row ignored: the loss is NaN (as in PyTorch) and the
		// gradient zero, not 0·∞.
		return sum.MulScalar(0).AddScalar(math.NaN())
	}
	return sum.MulScalar(-1 / float64(count))
}

// sumSquaresComposed writes Σ x² (in x's statistics dtype) into the
// one-element view d.
func sumSquaresComposed(d, x *Tensor) {
	var s *Tensor
	NoGrad(func() { s = x.Cast(statDType(x.dtype)).Square().Sum() })
	launch(x.dev, kcall{in: tensors(s), out: tensors(d), name: "copy", dt: s.dtype, shapes: shapesOf(s, d), bytes: bytesOf(s, d)},
		func(be backend.Backend) { be.Copy(d.bv(), s.bv()) })
}

// adamWComposed is AdamWUpdate from elementwise ops: the moments and the
// parameter rewritten in place, each from its own expression (so each
// element is rounded several times, where the kernels round once).
func adamWComposed(param, g, m, v *Tensor, p AdamWParams) {
	NoGrad(func() {
		m.CopyFrom(m.MulScalar(p.Beta1).Add(g.MulScalar(1 - p.Beta1)))
		v.CopyFrom(v.MulScalar(p.Beta2).Add(g.Square().MulScalar(1 - p.Beta2)))
		t := float64(p.Step)
		bc1 := 1 - math.Pow(p.Beta1, t)
		bc2 := math.Sqrt(1 - math.Pow(p.Beta2, t))
		denom := v.Sqrt().MulScalar(1 / bc2).AddScalar(p.Eps)
		step := m.Div(denom).MulScalar(p.LR / bc1)
		param.CopyFrom(param.MulScalar(1 - p.LR*p.WeightDecay).Sub(step))
	})
}
