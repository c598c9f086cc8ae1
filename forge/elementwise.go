package forge

import (
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// ---------------------------------------------------------------------------
// Unary ops

// unary applies op to t, recording op's derivative for the backward pass.
func (t *Tensor) unary(op backend.UnaryOp, s backend.Scalars) *Tensor {
	name := op.String()
	sameFloat(name, t)
	out := newTensor(t.dev, t.dtype, t.shape)
	launch(t.dev, kcall{in: tensors(t), out: tensors(out), name: "unary." + name, dt: t.dtype, shapes: shapesOf(t, out), bytes: bytesOf(t, out), flops: int64(t.Numel())},
		func(b backend.Backend) { b.Unary(op, s, out.bv(), t.bv()) })
	if op == backend.Sign || op == backend.Round {
		return out
	}
	return record(out, name, []*Tensor{t}, func(g *Tensor) []*Tensor {
		dx := newTensor(g.dev, g.dtype, g.shape)
		launch(g.dev, kcall{in: tensors(t, out, g), out: tensors(dx), name: "unary_grad." + name, dt: g.dtype, shapes: shapesOf(t, out, g, dx), bytes: bytesOf(t, out, g, dx), flops: int64(g.Numel())},
			func(b backend.Backend) { b.UnaryGrad(op, s, dx.bv(), t.bv(), out.bv(), g.bv()) })
		return []*Tensor{dx}
	})
}

// Neg returns −t.
func (t *Tensor) Neg() *Tensor { return t.unary(backend.Neg, backend.Scalars{}) }

// Exp returns eᵗ.
func (t *Tensor) Exp() *Tensor { return t.unary(backend.Exp, backend.Scalars{}) }

// Log returns the natural logarithm.
func (t *Tensor) Log() *Tensor { return t.unary(backend.Log, backend.Scalars{}) }

// Sqrt returns √t.
func (t *Tensor) Sqrt() *Tensor { return t.unary(backend.Sqrt, backend.Scalars{}) }

// Rsqrt returns 1/√t.
func (t *Tensor) Rsqrt() *Tensor { return t.unary(backend.Rsqrt, backend.Scalars{}) }

// Tanh returns tanh t.
func (t *Tensor) Tanh() *Tensor { return t.unary(backend.Tanh, backend.Scalars{}) }

// Sigmoid returns 1/(1+e⁻ᵗ).
func (t *Tensor) Sigmoid() *Tensor { return t.unary(backend.Sigmoid, backend.Scalars{}) }

// SiLU returns t·sigmoid(t).
func (t *Tensor) SiLU() *Tensor { return t.unary(backend.SiLU, backend.Scalars{}) }

// GELU returns the tanh approximation 0.5t(1+tanh(√(2/π)(t+0.044715t³)))
// (PyTorch's approximate="tanh", GPT-2's).
func (t *Tensor) GELU() *Tensor { return t.unary(backend.GELUTanh, backend.Scalars{}) }

// GELUExact returns 0.5t(1+erf(t/√2)).
func (t *Tensor) GELUExact() *Tensor { return t.unary(backend.GELUErf, backend.Scalars{}) }

// ReLU returns max(t, 0).
func (t *Tensor) ReLU() *Tensor { return t.unary(backend.ReLU, backend.Scalars{}) }

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor { return t.unary(backend.Abs, backend.Scalars{}) }

// Sign returns −1, 0 or 1 (no gradient).
func (t *Tensor) Sign() *Tensor { return t.unary(backend.Sign, backend.Scalars{}) }

// Round returns the nearest integer, halves to even (torch.round,
// numpy.rint, IEEE roundTiesToEven: 0.5 → 0, 1.5 → 2, −2.5 → −2); it has
// no gradient (zero almost everywhere). FakeQuant passes a gradient
// straight through it instead.
func (t *Tensor) Round() *Tensor { return t.unary(backend.Round, backend.Scalars{}) }

// Square returns t².
func (t *Tensor) Square() *Tensor { return t.unary(backend.Square, backend.Scalars{}) }

// PowScalar returns tᵖ.
func (t *Tensor) PowScalar(p float64) *Tensor {
	return t.unary(backend.PowScalar, backend.Scalars{A: p})
}

// Clamp limits t to [lo, hi]; the gradient passes where lo ≤ t ≤ hi.
func (t *Tensor) Clamp(lo, hi float64) *Tensor {
	if lo > hi {
		panic(errorf("clamp", "lower bound %v above upper bound %v", lo, hi))
	}
	return t.unary(backend.Clamp, backend.Scalars{A: lo, B: hi})
}

// AddScalar returns t + s.
func (t *Tensor) AddScalar(s float64) *Tensor {
	return t.unary(backend.Affine, backend.Scalars{A: 1, B: s})
}

// SubScalar returns t − s.
func (t *Tensor) SubScalar(s float64) *Tensor {
	return t.unary(backend.Affine, backend.Scalars{A: 1, B: -s})
}

// MulScalar returns t·s.
func (t *Tensor) MulScalar(s float64) *Tensor { return t.unary(backend.Affine, backend.Scalars{A: s}) }

// DivScalar returns t/s.
func (t *Tensor) DivScalar(s float64) *Tensor {
	return t.unary(backend.Affine, backend.Scalars{A: 1 / s})
}

// RSubScalar returns s − t.
func (t *Tensor) RSubScalar(s float64) *Tensor {
	return t.unary(backend.Affine, backend.Scalars{A: -1, B: s})
}

// RDivScalar returns s/t.
func (t *Tensor) RDivScalar(s float64) *Tensor {
	return t.unary(backend.RDivScalar, backend.Scalars{A: s})
}

// RPowScalar returns sᵗ.
func (t *Tensor) RPowScalar(s float64) *Tensor {
	return t.unary(backend.RPowScalar, backend.Scalars{A: s})
}

// ---------------------------------------------------------------------------
// Binary ops with numpy broadcasting

// BroadcastShapes returns the numpy broadcast of shapes, or an error
// message naming them.
func broadcastShapes(op string, a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			panic(errorf(op, "shapes %v and %v cannot be broadcast (axis %d: %d vs %d)", a, b, i, da, db))
		}
	}
	return out
}

// broadcastView returns t's view with shape (a broadcast of t's shape),
// stride 0 on stretched axes. No graph edge.
func (t *Tensor) broadcastView(shape []int) *Tensor {
	if equalShape(shape, t.shape) {
		return t
	}
	n, m := len(shape), t.Dim()
	strides := make([]int, n)
	for i := range shape {
		if j := i - (n - m); j >= 0 && t.shape[j] == shape[i] {
			strides[i] = t.strides[j]
		}
	}
	return t.view(shape, strides, t.offset)
}

// sumTo sums g over the axes that broadcasting added or stretched, giving
// shape (the inverse of broadcasting, for gradients).
func sumTo(g *Tensor, shape []int) *Tensor {
	if equalShape(g.shape, shape) {
		return g
	}
	n, m := g.Dim(), len(shape)
	var axes []int
	for i := 0; i < n; i++ {
		j := i - (n - m)
		if j < 0 || (shape[j] == 1 && g.shape[i] != 1) {
			axes = append(axes, i)
		}
	}
	s := g.Sum(axes...)
	return s.Reshape(shape...)
}

// binary applies op with broadcasting. grad returns the two input
// gradients at the output's shape (or nil), before reduction to the inputs'
// shapes.
func binary(op backend.BinaryOp, a, b *Tensor, grad func(g, out *Tensor) (ga, gb *Tensor)) *Tensor {
	name := op.String()
	sameFloat(name, a, b)
	shape := broadcastShapes(name, a.shape, b.shape)
	out := newTensor(a.dev, a.dtype, shape)
	av, bv := a.broadcastView(shape), b.broadcastView(shape)
	launch(a.dev, kcall{in: tensors(a, b), out: tensors(out), name: "binary." + name, dt: a.dtype, shapes: shapesOf(a, b, out), bytes: bytesOf(a, b, out), flops: int64(out.Numel())},
		func(be backend.Backend) { be.Binary(op, out.bv(), av.bv(), bv.bv()) })
	if grad == nil {
		return out
	}
	as, bs := shapeOf(a.shape), shapeOf(b.shape)
	return record(out, name, []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		ga, gb := grad(g, out)
		if ga != nil {
			ga = sumTo(ga, as)
		}
		if gb != nil {
			gb = sumTo(gb, bs)
		}
		return []*Tensor{ga, gb}
	})
}

// Add returns t + u (broadcasting).
func (t *Tensor) Add(u *Tensor) *Tensor {
	return binary(backend.Add, t, u, func(g, _ *Tensor) (*Tensor, *Tensor) { return g, g })
}

// Sub returns t − u (broadcasting).
func (t *Tensor) Sub(u *Tensor) *Tensor {
	return binary(backend.Sub, t, u, func(g, _ *Tensor) (*Tensor, *Tensor) {
		var gb *Tensor
		if u.requiresGrad {
			gb = g.Neg()
		}
		return g, gb
	})
}

// Mul returns t·u elementwise (broadcasting).
func (t *Tensor) Mul(u *Tensor) *Tensor {
	return binary(backend.Mul, t, u, func(g, _ *Tensor) (ga, gb *Tensor) {
		if t.requiresGrad {
			ga = g.Mul(u)
		}
		if u.requiresGrad {
			gb = g.Mul(t)
		}
		return
	})
}

// Div returns t/u elementwise (broadcasting).
func (t *Tensor) Div(u *Tensor) *Tensor {
	return binary(backend.Div, t, u, func(g, out *Tensor) (ga, gb *Tensor) {
		ga = g.Div(u)
		if u.requiresGrad {
			gb = ga.Mul(out).Neg() // −g·t/u²
		}
		if !t.requiresGrad {
			ga = nil
		}
		return
	})
}

// Pow returns tᵘ elementwise (broadcasting).
func (t *Tensor) Pow(u *Tensor) *Tensor {
	return binary(backend.Pow, t, u, func(g, out *Tensor) (ga, gb *Tensor) {
		// As in PyTorch, the terms are 0 where they are a limit of 0·∞:
		// d/dt at u = 0, and d/du at t = 0 with u ≥ 0.
		zero := scalarLike(g, 0)
		if t.requiresGrad { // u·t^(u−1)
			ga = g.Mul(u).Mul(binary(backend.Pow, t, u.AddScalar(-1), nil))
			ga = Where(binary(backend.Eq, u, zero, nil), zero, ga)
		}
		if u.requiresGrad { // tᵘ·ln t
			gb = g.Mul(out).Mul(t.Log())
			tZero := binary(backend.Eq, t, zero, nil).Mul(binary(backend.Ge, u, zero, nil))
			gb = Where(tZero, zero, gb)
		}
		return
	})
}

// Maximum returns the elementwise maximum; ties split the gradient evenly.
func (t *Tensor) Maximum(u *Tensor) *Tensor {
	return binary(backend.Maximum, t, u, func(g, _ *Tensor) (*Tensor, *Tensor) { return tieGrads(g, t, u, backend.Gt) })
}

// Minimum returns the elementwise minimum; ties split the gradient evenly.
func (t *Tensor) Minimum(u *Tensor) *Tensor {
	return binary(backend.Minimum, t, u, func(g, _ *Tensor) (*Tensor, *Tensor) { return tieGrads(g, t, u, backend.Lt) })
}

// tieGrads routes g to the winner of cmp, half to each on ties.
func tieGrads(g, t, u *Tensor, cmp backend.BinaryOp) (*Tensor, *Tensor) {
	win := binary(cmp, t, u, nil)
	tie := binary(backend.Eq, t, u, nil).MulScalar(0.5)
	wa := win.Add(tie)
	wb := wa.RSubScalar(1)
	return g.Mul(wa), g.Mul(wb)
}

// Eq returns 1 where t == u, else 0 (t's dtype, no gradient).
func (t *Tensor) Eq(u *Tensor) *Tensor { return binary(backend.Eq, t, u, nil) }

// Ne returns 1 where t ≠ u.
func (t *Tensor) Ne(u *Tensor) *Tensor { return binary(backend.Ne, t, u, nil) }

// Lt returns 1 where t < u.
func (t *Tensor) Lt(u *Tensor) *Tensor { return binary(backend.Lt, t, u, nil) }

// Le returns 1 where t ≤ u.
func (t *Tensor) Le(u *Tensor) *Tensor { return binary(backend.Le, t, u, nil) }

// Gt returns 1 where t > u.
func (t *Tensor) Gt(u *Tensor) *Tensor { return binary(backend.Gt, t, u, nil) }

// Ge returns 1 where t ≥ u.
func (t *Tensor) Ge(u *Tensor) *Tensor { return binary(backend.Ge, t, u, nil) }

// scalarLike returns a 0-d tensor holding v with t's dtype and device.
func scalarLike(t *Tensor, v float64) *Tensor { return fullOn("full", t.dev, t.dtype, nil, v) }

// Where returns a where cond is non-zero, else b (all broadcast together).
// cond may be of any dtype and carries no gradient.
func Where(cond, a, b *Tensor) *Tensor {
	sameFloat("where", a, b)
	sameDevice("where", cond, a)
	shape := broadcastShapes("where", broadcastShapes("where", cond.shape, a.shape), b.shape)
	out := newTensor(a.dev, a.dtype, shape)
	cv, av, bv := cond.broadcastView(shape), a.broadcastView(shape), b.broadcastView(shape)
	launch(a.dev, kcall{in: tensors(cond, a, b), out: tensors(out), name: "where", dt: a.dtype, shapes: shapesOf(cond, a, b, out), bytes: bytesOf(cond, a, b, out)},
		func(be backend.Backend) { be.Where(out.bv(), cv.bv(), av.bv(), bv.bv()) })
	as, bs := shapeOf(a.shape), shapeOf(b.shape)
	return record(out, "where", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		zero := scalarLike(g, 0)
		var ga, gb *Tensor
		if a.requiresGrad {
			ga = sumTo(Where(cond, g, zero), as)
		}
		if b.requiresGrad {
			gb = sumTo(Where(cond, zero, g), bs)
		}
		return []*Tensor{ga, gb}
	})
}

// MaskedFill returns t with v wherever mask is non-zero (mask broadcasts
// to t's shape).
func (t *Tensor) MaskedFill(mask *Tensor, v float64) *Tensor {
	sameFloat("masked_fill", t)
	sameDevice("masked_fill", t, mask)
	shape := broadcastShapes("masked_fill", mask.shape, t.shape)
	if !equalShape(shape, t.shape) {
		panic(errorf("masked_fill", "mask %v does not broadcast to the tensor's shape %v", mask.shape, t.shape))
	}
	return Where(mask, scalarLike(t, v), t)
}

// Helpers used by other files.

// addInto adds g into dst in place (no graph).
func addInto(dst, g *Tensor) {
	gv := g.broadcastView(dst.shape)
	launch(dst.dev, kcall{in: tensors(dst, g), out: tensors(dst), name: "binary.add", dt: dst.dtype, shapes: shapesOf(dst, g), bytes: 3 * bytesOf(dst)},
		func(b backend.Backend) { b.Binary(backend.Add, dst.bv(), dst.bv(), gv.bv()) })
}

// keepDims returns shape with the given (normalised) axes set to 1.
func keepDims(shape []int, axes []int) []int {
	s := slices.Clone(shape)
	for _, a := range axes {
		s[a] = 1
	}
	return s
}
