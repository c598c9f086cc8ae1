package forge

import (
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// MatMul returns the matrix product t @ u. Both operands need at least two
// dimensions: (…, M, K) @ (…, K, N) → (…, M, N), with the batch dimensions
// broadcast (numpy rules). Transposed operands (views from T, Transpose or
// Permute) are passed to the kernel as they are, never copied. A batched t
// times a 2-D u is computed as one (B·M, K) @ (K, N) product when t's rows
// are contiguous.
func (t *Tensor) MatMul(u *Tensor) *Tensor {
	sameFloat("matmul", t, u)
	if t.Dim() < 2 || u.Dim() < 2 {
		panic(errorf("matmul", "operands need at least 2 dimensions: %v @ %v (use Unsqueeze)", t.shape, u.shape))
	}
	m, k := t.shape[t.Dim()-2], t.shape[t.Dim()-1]
	k2, n := u.shape[u.Dim()-2], u.shape[u.Dim()-1]
	if k != k2 {
		panic(errorf("matmul", "inner dimensions differ: %v @ %v", t.shape, u.shape))
	}
	// Fold the batch of t into its rows when u is a plain matrix.
	if t.Dim() > 2 && u.Dim() == 2 && t.IsContiguous() {
		lead := shapeOf(t.shape[:t.Dim()-1])
		out := t.Reshape(numel(lead), k).MatMul(u)
		return out.Reshape(append(lead, n)...)
	}
	a, b := matOperand(t), matOperand(u)
	var batch []int
	if err := Try(func() { batch = broadcastShapes("matmul", a.shape[:a.Dim()-2], b.shape[:b.Dim()-2]) }); err != nil {
		panic(errorf("matmul", "batch dimensions do not broadcast: %v @ %v", t.shape, u.shape))
	}
	outShape := append(slices.Clone(batch), m, n)
	av := a.broadcastView(append(slices.Clone(batch), m, k))
	bv := b.broadcastView(append(slices.Clone(batch), k, n))
	out := newTensor(t.dev, t.dtype, outShape)
	matmulInto(out, av, bv, false)
	return recordMatMul(out, a, b)
}

// recordMatMul records out = a @ b (a and b as the kernel saw them) for
// autograd.
func recordMatMul(out, a, b *Tensor) *Tensor {
	out = record(out, "matmul", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		if a.requiresGrad && b.requiresGrad && a.Dim() == 2 && b.Dim() == 2 {
			if !b.IsContiguous() && b.T().IsContiguous() {
				// b is a transposed matrix (a linear layer's W.T()): form
				// its gradient in W's layout, dBᵀ = dCᵀ @ A, so that W's
				// gradient arrives contiguous and unshared.
				ga, gbt := matmulPair(g, b.T(), g.T(), a)
				return []*Tensor{ga, gbt.T()}
			}
			ga, gb := matmulPair(g, b.T(), a.T(), g)
			return []*Tensor{ga, gb}
		}
		var ga, gb *Tensor
		if a.requiresGrad { // dA = dC @ Bᵀ
			ga = sumTo(g.MatMul(b.T()), a.shape)
		}
		if b.requiresGrad { // dB = Aᵀ @ dC
			gb = sumTo(a.T().MatMul(g), b.shape)
		}
		return []*Tensor{ga, gb}
	})
	if out.node != nil && a.requiresGrad && b.requiresGrad && a.Dim() == 2 && b.Dim() == 2 {
		out.node.freshGrads = true // matmulPair's products, or views of them
	}
	return out
}

// MatMulPair returns t1 @ u1 and t2 @ u2, two independent products
// computed by one kernel launch: a backend that can runs them side by
// side, each on its own worker, rather than splitting each across the
// workers in turn — the gate and up projections of a SwiGLU MLP, say. The
// values are those of two MatMul calls, bit for bit, and so are the
// gradients. Each pair follows MatMul's rules; pairs other than a
// contiguous t (…, M, K) times a 2-D u (K, N) are computed by MatMul.
func MatMulPair(t1, u1, t2, u2 *Tensor) (*Tensor, *Tensor) {
	pairable := func(t, u *Tensor) bool {
		return t.Dim() >= 2 && u.Dim() == 2 && t.IsContiguous() && t.shape[t.Dim()-1] == u.shape[0]
	}
	if !pairable(t1, u1) || !pairable(t2, u2) {
		return t1.MatMul(u1), t2.MatMul(u2)
	}
	sameFloat("matmul", t1, u1, t2, u2)
	fold := func(t *Tensor) (*Tensor, []int) {
		lead := shapeOf(t.shape[:t.Dim()-1])
		return t.Reshape(numel(lead), t.shape[t.Dim()-1]), lead
	}
	a1, lead1 := fold(t1)
	a2, lead2 := fold(t2)
	b1, b2 := matOperand(u1), matOperand(u2)
	o1, o2 := matmulPair(a1, b1, a2, b2)
	o1, o2 = recordMatMul(o1, a1, b1), recordMatMul(o2, a2, b2)
	return o1.Reshape(append(lead1, u1.shape[1])...), o2.Reshape(append(lead2, u2.shape[1])...)
}

// matmulPair returns the two 2-D products a1 @ b1 and a2 @ b2, computed by
// one kernel launch: a backend that runs backend.KernelMatMulMany runs
// them side by side (the two gradients of a product are independent and
// have equal FLOPs), others one after the other.
func matmulPair(a1, b1, a2, b2 *Tensor) (*Tensor, *Tensor) {
	a1, b1, a2, b2 = matOperand(a1), matOperand(b1), matOperand(a2), matOperand(b2)
	o1 := newTensor(a1.dev, a1.dtype, []int{a1.shape[0], b1.shape[1]})
	o2 := newTensor(a2.dev, a2.dtype, []int{a2.shape[0], b2.shape[1]})
	f1 := 2 * int64(a1.shape[0]) * int64(a1.shape[1]) * int64(b1.shape[1])
	f2 := 2 * int64(a2.shape[0]) * int64(a2.shape[1]) * int64(b2.shape[1])
	launch(o1.dev, kcall{in: tensors(a1, b1, a2, b2), out: tensors(o1, o2),
		name: "matmul", dt: o1.dtype, shapes: shapesOf(a1, b1, a2, b2, o1, o2),
		flops: f1 + f2, bytes: bytesOf(a1, b1, a2, b2, o1, o2),
	}, func(be backend.Backend) {
		ops := []backend.MatMulOp{{Dst: o1.bv(), A: a1.bv(), B: b1.bv()}, {Dst: o2.bv(), A: a2.bv(), B: b2.bv()}}
		if o1.dev.Supports(backend.KernelMatMulMany, o1.dtype) {
			be.MatMulMany(ops)
			return
		}
		for _, op := range ops {
			be.MatMul(op.Dst, op.A, op.B, false)
		}
	})
	return o1, o2
}

// matOperand returns t if its last two axes are row- or column-major (the
// kernel's contract), else a contiguous copy.
func matOperand(t *Tensor) *Tensor {
	r, c := t.Dim()-2, t.Dim()-1
	sr, sc := t.strides[r], t.strides[c]
	rows, cols := t.shape[r], t.shape[c]
	rowMajor := (sc == 1 || cols == 1) && (sr >= max(cols, 1) || rows == 1)
	colMajor := (sr == 1 || rows == 1) && (sc >= max(rows, 1) || cols == 1)
	if rowMajor || colMajor {
		return t
	}
	return t.Contiguous()
}

// matmulInto runs the matmul kernel: out (contiguous, batch…, M, N) = a @ b
// (or += with accumulate); a and b are already broadcast to out's batch.
func matmulInto(out, a, b *Tensor, accumulate bool) {
	m, k, n := a.shape[a.Dim()-2], a.shape[a.Dim()-1], b.shape[b.Dim()-1]
	batches := numel(out.shape[:out.Dim()-2])
	launch(out.dev, kcall{in: tensors(a, b), out: tensors(out),
		name: "matmul", dt: out.dtype, shapes: shapesOf(a, b, out),
		flops: 2 * int64(batches) * int64(m) * int64(n) * int64(k),
		bytes: int64(batches) * int64(m*k+k*n+m*n) * int64(out.dtype.Size()),
	}, func(be backend.Backend) { be.MatMul(out.bv(), a.bv(), b.bv(), accumulate) })
}
