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
	return record(out, "matmul", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		var ga, gb *Tensor
		if a.requiresGrad { // dA = dC @ Bᵀ
			ga = sumTo(g.MatMul(b.T()), a.shape)
		}
		if b.requiresGrad { // dB = Aᵀ @ dC
			gb = sumTo(a.T().MatMul(g), b.shape)
		}
		return []*Tensor{ga, gb}
	})
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
	launch(out.dev, kcall{
		name: "matmul", dt: out.dtype, shapes: shapesOf(a, b, out),
		flops: 2 * int64(batches) * int64(m) * int64(n) * int64(k),
		bytes: int64(batches) * int64(m*k+k*n+m*n) * int64(out.dtype.Size()),
	}, func(be backend.Backend) { be.MatMul(out.bv(), a.bv(), b.bv(), accumulate) })
}
