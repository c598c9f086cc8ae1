package backend

// Unimplemented can be embedded in a backend that does not (yet) provide
// every kernel: each kernel method panics with ErrNotImplemented. Embed it
// by value and set BackendName.
type Unimplemented struct{ BackendName string }

// Fill panics with ErrNotImplemented.
func (u Unimplemented) Fill(dst View, v float64) {
	panic(ErrNotImplemented{u.BackendName, "Fill"})
}

// Copy panics with ErrNotImplemented.
func (u Unimplemented) Copy(dst, src View) {
	panic(ErrNotImplemented{u.BackendName, "Copy"})
}

// Unary panics with ErrNotImplemented.
func (u Unimplemented) Unary(op UnaryOp, s Scalars, dst, src View) {
	panic(ErrNotImplemented{u.BackendName, "Unary"})
}

// UnaryGrad panics with ErrNotImplemented.
func (u Unimplemented) UnaryGrad(op UnaryOp, s Scalars, dx, x, y, g View) {
	panic(ErrNotImplemented{u.BackendName, "UnaryGrad"})
}

// Binary panics with ErrNotImplemented.
func (u Unimplemented) Binary(op BinaryOp, dst, a, b View) {
	panic(ErrNotImplemented{u.BackendName, "Binary"})
}

// Where panics with ErrNotImplemented.
func (u Unimplemented) Where(dst, cond, a, b View) {
	panic(ErrNotImplemented{u.BackendName, "Where"})
}

// Reduce panics with ErrNotImplemented.
func (u Unimplemented) Reduce(op ReduceOp, dst, src View, nred int) {
	panic(ErrNotImplemented{u.BackendName, "Reduce"})
}

// MatMul panics with ErrNotImplemented.
func (u Unimplemented) MatMul(dst, a, bm View, accumulate bool) {
	panic(ErrNotImplemented{u.BackendName, "MatMul"})
}

// Softmax panics with ErrNotImplemented.
func (u Unimplemented) Softmax(y, x View, log bool) {
	panic(ErrNotImplemented{u.BackendName, "Softmax"})
}

// SoftmaxBackward panics with ErrNotImplemented.
func (u Unimplemented) SoftmaxBackward(dx, y, dy View, log bool) {
	panic(ErrNotImplemented{u.BackendName, "SoftmaxBackward"})
}

// LayerNorm panics with ErrNotImplemented.
func (u Unimplemented) LayerNorm(y, mean, rstd, x, w, b View, eps float64) {
	panic(ErrNotImplemented{u.BackendName, "LayerNorm"})
}

// LayerNormBackward panics with ErrNotImplemented.
func (u Unimplemented) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd View) {
	panic(ErrNotImplemented{u.BackendName, "LayerNormBackward"})
}

// RMSNorm panics with ErrNotImplemented.
func (u Unimplemented) RMSNorm(y, rstd, x, w View, eps float64) {
	panic(ErrNotImplemented{u.BackendName, "RMSNorm"})
}

// RMSNormBackward panics with ErrNotImplemented.
func (u Unimplemented) RMSNormBackward(dx, dw, dy, x, w, rstd View) {
	panic(ErrNotImplemented{u.BackendName, "RMSNormBackward"})
}

// RoPE panics with ErrNotImplemented.
func (u Unimplemented) RoPE(y, x View, pos0 int, theta float64, inverse bool) {
	panic(ErrNotImplemented{u.BackendName, "RoPE"})
}

// IndexSelect panics with ErrNotImplemented.
func (u Unimplemented) IndexSelect(dst, src, idx View, axis int) {
	panic(ErrNotImplemented{u.BackendName, "IndexSelect"})
}

// IndexAdd panics with ErrNotImplemented.
func (u Unimplemented) IndexAdd(dst, src, idx View, axis int) {
	panic(ErrNotImplemented{u.BackendName, "IndexAdd"})
}

// Gather panics with ErrNotImplemented.
func (u Unimplemented) Gather(dst, src, idx View, axis int) {
	panic(ErrNotImplemented{u.BackendName, "Gather"})
}

// ScatterAdd panics with ErrNotImplemented.
func (u Unimplemented) ScatterAdd(dst, g, idx View, axis int) {
	panic(ErrNotImplemented{u.BackendName, "ScatterAdd"})
}

// Attention panics with ErrNotImplemented.
func (u Unimplemented) Attention(out, lse, q, k, v View, p AttentionParams) {
	panic(ErrNotImplemented{u.BackendName, "Attention"})
}

// AttentionBackward panics with ErrNotImplemented.
func (u Unimplemented) AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout View, p AttentionParams) {
	panic(ErrNotImplemented{u.BackendName, "AttentionBackward"})
}

// CrossEntropy panics with ErrNotImplemented.
func (u Unimplemented) CrossEntropy(loss, lse, logits, targets View, ignore int) {
	panic(ErrNotImplemented{u.BackendName, "CrossEntropy"})
}

// CrossEntropyBackward panics with ErrNotImplemented.
func (u Unimplemented) CrossEntropyBackward(dlogits, logits, lse, targets, g View, ignore int, scale float64) {
	panic(ErrNotImplemented{u.BackendName, "CrossEntropyBackward"})
}

// SwiGLU panics with ErrNotImplemented.
func (u Unimplemented) SwiGLU(y, a, b View) {
	panic(ErrNotImplemented{u.BackendName, "SwiGLU"})
}

// SwiGLUBackward panics with ErrNotImplemented.
func (u Unimplemented) SwiGLUBackward(da, db, a, b, g View) {
	panic(ErrNotImplemented{u.BackendName, "SwiGLUBackward"})
}

// SumSquares panics with ErrNotImplemented.
func (u Unimplemented) SumSquares(dst, src View) {
	panic(ErrNotImplemented{u.BackendName, "SumSquares"})
}

// AdamW panics with ErrNotImplemented.
func (u Unimplemented) AdamW(param, grad, m, v View, p AdamWParams) {
	panic(ErrNotImplemented{u.BackendName, "AdamW"})
}
