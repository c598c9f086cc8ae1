package forge

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// SwiGLU returns silu(a)·b, the gate of a SwiGLU MLP
// (W_down · (silu(x·W_gate) ⊙ x·W_up)), as one fused kernel forward and one
// backward: the same values as a.SiLU().Mul(b), without the intermediate
// tensors and their passes over memory. a and b must have one shape (for
// broadcasting, use the composition).
func SwiGLU(a, b *Tensor) *Tensor {
	sameFloat("swiglu", a, b)
	if !equalShape(a.shape, b.shape) {
		panic(errorf("swiglu", "operands must have one shape, got %v and %v (use a.SiLU().Mul(b) to broadcast)", a.shape, b.shape))
	}
	a, b = a.Contiguous(), b.Contiguous()
	y := newTensor(a.dev, a.dtype, a.shape)
	n := int64(a.Numel())
	launch(a.dev, kcall{name: "swiglu", dt: a.dtype, shapes: shapesOf(a, b, y), bytes: bytesOf(a, b, y), flops: 6 * n},
		func(be backend.Backend) { be.SwiGLU(y.bv(), a.bv(), b.bv()) })
	return record(y, "swiglu", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		da := newTensor(g.dev, g.dtype, g.shape)
		db := newTensor(g.dev, g.dtype, g.shape)
		launch(g.dev, kcall{name: "swiglu.backward", dt: g.dtype, shapes: shapesOf(a, b, g, da, db), bytes: bytesOf(a, b, g, da, db), flops: 12 * n},
			func(be backend.Backend) { be.SwiGLUBackward(da.bv(), db.bv(), a.bv(), b.bv(), g.bv()) })
		return []*Tensor{da, db}
	})
}

// SumSquares returns Σ t² over all elements as a 0-d tensor, computed by
// one fused kernel (accumulated in float64 on the CPU, deterministic).
func (t *Tensor) SumSquares() *Tensor {
	sameFloat("sum_squares", t)
	x := t.Contiguous()
	out := newTensor(t.dev, t.dtype, nil)
	sumSquaresInto(out, 0, x)
	return record(out, "sum_squares", []*Tensor{x}, func(g *Tensor) []*Tensor {
		return []*Tensor{x.Mul(g.MulScalar(2))}
	})
}

// sumSquaresInto runs the SumSquares kernel of contiguous x into element i
// of the 1-D (or 0-d) contiguous dst.
func sumSquaresInto(dst *Tensor, i int, x *Tensor) {
	d := dst.view([]int{}, []int{}, dst.offset+i)
	launch(x.dev, kcall{name: "sum_squares", dt: x.dtype, shapes: shapesOf(x), bytes: bytesOf(x), flops: 2 * int64(x.Numel())},
		func(be backend.Backend) { be.SumSquares(d.bv(), x.bv()) })
}

// SumSquaresOf returns Σ t² of each tensor (float tensors, on any devices),
// as float64s in the order given: one fused kernel per tensor, the results
// of all tensors sharing a device and dtype written to one buffer that is
// read back once. No graph is recorded. It is the reduction behind
// global-norm gradient clipping.
func SumSquaresOf(ts []*Tensor) []float64 {
	out := make([]float64, len(ts))
	type key struct {
		dev *Device
		dt  DType
	}
	groups := map[key][]int{}
	var order []key
	for i, t := range ts {
		sameFloat("sum_squares", t)
		k := key{t.dev, t.dtype}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		sums := newTensor(k.dev, k.dt, []int{len(idx)})
		for j, i := range idx {
			sumSquaresInto(sums, j, ts[i].Contiguous())
		}
		for j, v := range sums.Float64s() {
			out[idx[j]] = v
		}
	}
	return out
}

// AdamWParams configures one fused AdamW update (see backend.AdamWParams).
type AdamWParams = backend.AdamWParams

// AdamWUpdate applies one AdamW update in place, as one fused kernel, to
// param and its first and second moments m and v, from grad (all of one
// shape, dtype and device; param, m and v contiguous):
//
//	m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	param ← param·(1 − lr·wd) − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps)
//
// Like CopyFrom, it writes in place and is not recorded: call it inside
// NoGrad on a parameter that requires a gradient.
func AdamWUpdate(param, grad, m, v *Tensor, p AdamWParams) {
	const op = "adamw"
	sameFloat(op, param, grad, m, v)
	for _, u := range []*Tensor{grad, m, v} {
		if !equalShape(u.shape, param.shape) {
			panic(errorf(op, "shapes differ: param %v, grad %v, m %v, v %v", param.shape, grad.shape, m.shape, v.shape))
		}
	}
	for _, u := range []*Tensor{param, m, v} {
		if !u.IsContiguous() {
			panic(errorf(op, "param, m and v must be contiguous (updated in place); got strides %v for %v", u.strides, u.shape))
		}
		if u.requiresGrad && GradEnabled() {
			panic(errorf(op, "in-place update of %v, which requires a gradient, while recording; wrap it in forge.NoGrad", u.shape))
		}
	}
	if p.Step < 1 {
		panic(errorf(op, "step must be ≥ 1 (1-based), got %d", p.Step))
	}
	for _, f := range []float64{p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			panic(errorf(op, "hyperparameters must be finite, got %+v", p))
		}
	}
	g := grad.Contiguous()
	launch(param.dev, kcall{name: "adamw", dt: param.dtype, shapes: shapesOf(param, g, m, v), bytes: bytesOf(param, g, m, v, param, m, v), flops: 14 * int64(param.Numel())},
		func(be backend.Backend) { be.AdamW(param.bv(), g.bv(), m.bv(), v.bv(), p) })
}

// MulScalarInPlace multiplies t by s in place and returns t. Views of t
// see the new values. Like CopyFrom, it is not recorded: call it inside
// NoGrad on a tensor that requires a gradient (gradient clipping scales
// Grad() this way). t must not be a broadcast view.
func (t *Tensor) MulScalarInPlace(s float64) *Tensor {
	sameFloat("mul_scalar_in_place", t)
	if t.requiresGrad && GradEnabled() {
		panic(errorf("mul_scalar_in_place", "in-place write to %v, which requires a gradient, while recording; wrap it in forge.NoGrad", t.shape))
	}
	for i, st := range t.strides {
		if st == 0 && t.shape[i] > 1 {
			panic(errorf("mul_scalar_in_place", "%v is a broadcast view (stride 0 on axis %d): its elements share memory", t.shape, i))
		}
	}
	sc := backend.Scalars{A: s}
	launch(t.dev, kcall{name: "unary.affine", dt: t.dtype, shapes: shapesOf(t, t), bytes: 2 * bytesOf(t), flops: int64(t.Numel())},
		func(b backend.Backend) { b.Unary(backend.Affine, sc, t.bv(), t.bv()) })
	return t
}
