package forge

import "github.com/forgeml/forge/forge/backend"

// Softplus returns log(1 + eᵗ) elementwise (PyTorch's F.softplus with
// β = 1), a smooth ReLU whose derivative is sigmoid(t). It is computed
// without overflow or cancellation as max(t, 0) + log1p(e^−|t|): one
// kernel where the device has it (backend.KernelSoftplus), else composed
// from Exp, Log and elementwise arithmetic, with log1p(u) evaluated as
// u·log(w)/(w−1), w = 1+u (u where w rounds to 1), which is within a few
// units in the last place of log1p for every u ≥ 0.
func (t *Tensor) Softplus() *Tensor {
	sameFloat("softplus", t)
	var y *Tensor
	if t.dev.Supports(backend.KernelSoftplus, t.dtype) {
		x := t.Contiguous()
		y = newTensor(x.dev, x.dtype, x.shape)
		launch(x.dev, kcall{in: tensors(x), out: tensors(y), name: "softplus", dt: x.dtype, shapes: shapesOf(x, y), bytes: bytesOf(x, y), flops: 4 * int64(x.Numel())},
			func(be backend.Backend) { be.Softplus(y.bv(), x.bv()) })
	} else {
		NoGrad(func() { y = softplusComposed(t) })
	}
	return record(y, "softplus", []*Tensor{t}, func(g *Tensor) []*Tensor {
		if !g.dev.Supports(backend.KernelSoftplus, g.dtype) {
			return []*Tensor{g.Mul(t.Sigmoid())}
		}
		x, gc := t.Contiguous(), g.Contiguous()
		dx := newTensor(gc.dev, gc.dtype, gc.shape)
		launch(gc.dev, kcall{in: tensors(x, gc), out: tensors(dx), name: "softplus.backward", dt: gc.dtype, shapes: shapesOf(x, gc, dx), bytes: bytesOf(x, gc, dx), flops: 4 * int64(gc.Numel())},
			func(be backend.Backend) { be.SoftplusBackward(dx.bv(), x.bv(), gc.bv()) })
		return []*Tensor{dx}
	})
}

// softplusComposed is Softplus from the required kernels.
func softplusComposed(t *Tensor) *Tensor {
	u := t.Abs().Neg().Exp() // e^−|t| ∈ [0, 1]
	w := u.AddScalar(1)
	// log1p(u) = u·log(w)/(w−1) where w = 1+u is not 1 (the quotient
	// corrects w's rounding); u itself where it is (u < ulp(1)/2).
	l := Where(w.Eq(OnesLike(w)), u, u.Mul(w.Log()).Div(w.SubScalar(1)))
	return t.ReLU().Add(l)
}
