// Package backend defines the interface every Forge device implements.
//
// It is a leaf package: it imports nothing of Forge's. The tensor package
// (forge) builds every public op out of the primitive kernels below and
// records its autograd graph; a backend only moves memory and runs kernels.
//
// # Rules every kernel follows
//
//   - Shapes and strides are in elements, never bytes. A stride of 0 is a
//     broadcast dimension. Views passed as inputs may be strided unless the
//     kernel's documentation says "contiguous"; outputs are always contiguous
//     and never alias an input unless stated.
//   - Kernels are asynchronous as far as the caller is concerned: a backend may
//     queue work and run it later. Values become visible to the host only
//     through Read, which synchronises first.
//   - Kernels never allocate the buffers they write: the caller passes them.
//   - Float kernels run on Float32 and Float64 views; indices are Int32.
//     A kernel given a dtype it does not support panics with a message naming
//     the kernel and the dtype. The forge package checks shapes and dtypes
//     before calling, so kernels check only what forge cannot.
//   - Float16 and BFloat16 are storage dtypes: every backend allocates,
//     writes, reads, fills and copies (converting) them; whether other
//     kernels take them is the backend's choice (the CPU, the float32 and
//     float64 reference, computes in neither). Host slices of them are
//     []uint16 bit patterns; package forge/half converts.
//   - A backend that computes in 16 bits (Metal) widens 16-bit inputs,
//     computes in float32 and rounds each 16-bit output once. A call mixes
//     at most one 16-bit dtype with float32, and only where stated here:
//     statistics kept for a backward (norms' mean and rstd, attention's
//     and cross-entropy's lse, per-row losses) are Float32; a norm's x and
//     y are each Float32 or the 16-bit dtype, its w and b too, with dx
//     like x, dy like y and dw, db like w; Reduce writes src's dtype or
//     Float32; SumSquares writes Float32; MatMul's operands share a 16-bit
//     dtype and dst is that or Float32. Every other kernel takes views of
//     one dtype.
//
// A backend embeds Unimplemented, whose kernel methods panic with
// ErrNotImplemented and whose services have do-nothing defaults, and
// returns its Capabilities: the kernels it runs and their dtypes. For an
// optional kernel it does not list, forge composes the op from required
// kernels; a required kernel it lacks is reported by name by the
// conformance suite (forge/forgetest), never replaced silently.
package backend

//go:generate go run ./internal/genunimpl

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// DType is the element type of a buffer.
type DType uint8

const (
	Float32  DType = iota // IEEE 754 single precision; the training dtype
	Float64               // double precision, CPU only; for gradient checks
	Int32                 // token ids, indices, argmax results
	Float16               // IEEE 754 binary16; a storage dtype (host slices: []uint16 bits)
	BFloat16              // the top 16 bits of a float32; a storage dtype (likewise)
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Float64:
		return 8
	case Float16, BFloat16:
		return 2
	}
	return 4
}

// IsFloat reports whether d is a floating-point dtype.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// IsHalf reports whether d is a 16-bit floating-point dtype (Float16 or
// BFloat16).
func (d DType) IsHalf() bool { return d == Float16 || d == BFloat16 }

// Buffer is a block of device memory holding Len elements of one dtype.
type Buffer interface {
	Len() int
	DType() DType
}

// View is a strided window onto a buffer: element (i0, i1, …) lives at
// Offset + Σ ik·Strides[k].
type View struct {
	Buf     Buffer
	Offset  int
	Shape   []int
	Strides []int
}

// Numel is the number of elements the view addresses.
func (v View) Numel() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// DType is the dtype of the underlying buffer.
func (v View) DType() DType { return v.Buf.DType() }

// IsContiguous reports whether the view is row-major with no gaps
// (dimensions of size 1 may have any stride).
func (v View) IsContiguous() bool {
	want := 1
	for i := len(v.Shape) - 1; i >= 0; i-- {
		if v.Shape[i] != 1 && v.Strides[i] != want {
			return false
		}
		want *= v.Shape[i]
	}
	return true
}

// ContiguousStrides returns the row-major strides of shape.
func ContiguousStrides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// UnaryOp names an elementwise function of one argument. Param A and B are
// the op's scalar parameters where it has any.
//
// The ops are numbered in order from 0, a new one added at the end (before
// NumUnaryOps), and String gives each its name: the kernels/forge_ops.h
// header that Metal's kernels switch on is generated from this block and
// the names (go generate ./kernels/), as U_<NAME> = number; likewise for
// BinaryOp (B_) and ReduceOp (R_).
type UnaryOp uint8

const (
	Neg        UnaryOp = iota // -x
	Exp                       // e^x
	Log                       // ln x
	Sqrt                      // √x
	Rsqrt                     // 1/√x
	Tanh                      // tanh x
	Sigmoid                   // 1/(1+e^-x)
	SiLU                      // x·sigmoid(x)
	GELUTanh                  // 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
	GELUErf                   // 0.5x(1+erf(x/√2))
	ReLU                      // max(x, 0)
	Abs                       // |x|
	PowScalar                 // x^A
	Clamp                     // min(max(x, A), B)
	Affine                    // A·x + B (scalar add, sub, mul, div)
	RPowScalar                // A^x
	RDivScalar                // A/x
	Square                    // x²
	Sign                      // -1, 0, 1
	Round                     // nearest integer, halves to even (rint)
	// NumUnaryOps is the number of unary ops (not an op).
	NumUnaryOps
)

var unaryNames = [...]string{"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu",
	"gelu_tanh", "gelu_erf", "relu", "abs", "pow_scalar", "clamp", "affine", "rpow_scalar",
	"rdiv_scalar", "square", "sign", "round"}

func (o UnaryOp) String() string {
	if int(o) < len(unaryNames) {
		return unaryNames[o]
	}
	return fmt.Sprintf("unary(%d)", uint8(o))
}

// BinaryOp names an elementwise function of two arguments. Comparisons
// write 1 or 0 in the output's dtype.
type BinaryOp uint8

const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
	Pow     // a^b
	Maximum // max(a, b)
	Minimum // min(a, b)
	Eq
	Ne
	Lt
	Le
	Gt
	Ge
	// NumBinaryOps is the number of binary ops (not an op).
	NumBinaryOps
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "pow", "maximum", "minimum",
	"eq", "ne", "lt", "le", "gt", "ge"}

func (o BinaryOp) String() string {
	if int(o) < len(binaryNames) {
		return binaryNames[o]
	}
	return fmt.Sprintf("binary(%d)", uint8(o))
}

// ReduceOp names a reduction.
type ReduceOp uint8

const (
	ReduceSum ReduceOp = iota
	ReduceMax
	ReduceMin
	ReduceArgMax // index of the first maximum; dst is Int32
	ReduceArgMin // index of the first minimum; dst is Int32
	// NumReduceOps is the number of reductions (not an op).
	NumReduceOps
)

var reduceNames = [...]string{"sum", "max", "min", "argmax", "argmin"}

func (o ReduceOp) String() string {
	if int(o) < len(reduceNames) {
		return reduceNames[o]
	}
	return fmt.Sprintf("reduce(%d)", uint8(o))
}

// Scalars carries the scalar parameters of a unary op.
type Scalars struct{ A, B float64 }

// AttentionParams configures fused scaled-dot-product attention.
type AttentionParams struct {
	Scale  float64 // multiplies q·k; usually 1/√D
	Causal bool    // query i (at absolute position Tk-Tq+i) sees keys 0..Tk-Tq+i
}

// AdamWParams configures one AdamW update (PyTorch's torch.optim.AdamW,
// llm.c's kernel): with t = Step (1-based) and g the gradient,
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	w ← w·(1 − LR·WeightDecay) − (LR/(1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + Eps)
//
// The decay is decoupled (never through m and v) and Eps is outside the
// square root.
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Step                               int // 1-based count of updates, this one included
}

// Backend is a device: memory management plus the primitive kernels.
//
// Shape letters used below: N rows, C channels (last axis), B batch,
// H query heads, Hkv key/value heads (H % Hkv == 0), Tq query length,
// Tk key length, D head dimension, V vocabulary.
type Backend interface {
	// Name is the registry name, e.g. "cpu".
	Name() string

	// Alloc returns a buffer of n elements whose contents are unspecified.
	Alloc(dt DType, n int) Buffer
	// Free returns a buffer to the backend. The buffer must not be used
	// again; calling Free is optional (unreferenced buffers are collected).
	Free(b Buffer)
	// Write copies host data ([]float32, []float64 or []int32 matching the
	// buffer's dtype, len ≤ Len) into the buffer starting at element 0.
	// Float16 and BFloat16 buffers take a []uint16 of bit patterns (see
	// package forge/half for the conversions); the bits are stored as given.
	Write(dst Buffer, src any)
	// Read synchronises and copies the buffer's first len(dst) elements into
	// dst ([]float32, []float64 or []int32 matching the dtype; []uint16 of
	// bit patterns for Float16 and BFloat16).
	Read(src Buffer, dst any)
	// Sync waits for every queued kernel to finish.
	Sync()

	// Fill sets every element of dst to v, converted to dst's dtype as Copy
	// converts (for Float16 and BFloat16, v rounds once, from float64).
	Fill(dst View, v float64)
	// Copy copies src into dst elementwise (same shape; src may be strided
	// or broadcast, dst may be strided). It converts between dtypes: a
	// float to Int32 truncates toward zero; to Float16 or BFloat16 the
	// exact source value rounds once to nearest, ties to even, past the
	// largest finite value to ±Inf, and a NaN stays a NaN (the functions
	// of package forge/half); from Float16 or BFloat16 the value widens
	// exactly; otherwise as Go's conversions (float64 to float32 rounds to
	// nearest even).
	Copy(dst, src View)
	// Unary computes dst = op(src); src is broadcast to dst's shape. dst
	// may be src itself (the same view, no broadcast): the op then runs in
	// place.
	Unary(op UnaryOp, s Scalars, dst, src View)
	// UnaryGrad computes dx = g·op'(x) for the ops that have a derivative;
	// y = op(x) is passed too (some rules are cheaper in y). x, y, g have
	// dst's shape (they may be strided).
	UnaryGrad(op UnaryOp, s Scalars, dx, x, y, g View)
	// Binary computes dst = a op b; a and b carry broadcast strides so they
	// have dst's shape.
	Binary(op BinaryOp, dst, a, b View)
	// Where computes dst = cond ≠ 0 ? a : b with broadcast views.
	Where(dst, cond, a, b View)
	// Reduce reduces the last nred dimensions of src into dst, whose shape is
	// src.Shape[:len-nred] (contiguous). ArgMax/ArgMin write Int32 indices
	// into the flattened reduced extent.
	Reduce(op ReduceOp, dst, src View, nred int)

	// MatMul computes dst[b] = a[b] @ b[b] for every batch index b.
	// a is (..., M, K), bm is (..., K, N), dst is (..., M, N) contiguous.
	// The batch dims of a and bm are already broadcast to dst's (stride 0).
	// Each operand's last two dims are either row-major (stride (ld, 1)) or
	// column-major (stride (1, ld)): transposed operands arrive as views and
	// are never materialised. If accumulate, dst += a@b instead of dst = a@b.
	MatMul(dst, a, bm View, accumulate bool)

	// IndexSelect writes dst = src.index_select(axis, idx): src (P, S, Q)
	// contiguous as three flattened groups around axis, idx Int32 (I),
	// dst (P, I, Q). Out-of-range indices were checked by forge.
	IndexSelect(dst, src, idx View, axis int)
	// IndexAdd is IndexSelect's adjoint: dst (P, S, Q) is overwritten with
	// zeros, then dst[:, idx[i], :] += src[:, i, :] in index order
	// (deterministic, no atomics).
	IndexAdd(dst, src, idx View, axis int)
	// Gather writes dst[..., i, ...] = src[..., idx[..., i, ...], ...] along
	// axis (torch.gather); idx and dst share a shape, src matches it on every
	// other axis. All contiguous.
	Gather(dst, src, idx View, axis int)
	// ScatterAdd is Gather's adjoint: dst (src's shape) is zeroed, then
	// dst[..., idx[…], ...] += g[…], deterministic.
	ScatterAdd(dst, g, idx View, axis int)

	// Optional kernels. Package forge asks a backend for one only where
	// its Capabilities lists it (under the Kernel constant of
	// capabilities.go); otherwise it composes the op from the kernels
	// above (forge/composed.go). A backend without one embeds
	// Unimplemented, which provides the method.

	// Softmax writes y = softmax(x) (or log_softmax if log) over the last
	// axis. x and y are contiguous.
	Softmax(y, x View, log bool)
	// SoftmaxBackward writes dx from y (the forward output) and dy.
	// softmax: dx = y·(dy − Σ dy·y); log: dx = dy − exp(y)·Σ dy. Contiguous.
	SoftmaxBackward(dx, y, dy View, log bool)

	// LayerNorm normalises rows of x (N, C): y = (x−mean)·rstd·w + b, writing
	// mean and rstd (N). w and b may have a nil Buf (no affine). Contiguous.
	LayerNorm(y, mean, rstd, x, w, b View, eps float64)
	// LayerNormBackward writes dx (N, C), and dw, db (C) where their Buf is
	// not nil (overwriting them).
	LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd View)
	// RMSNorm: y = x·rstd·w with rstd = 1/√(mean(x²)+eps), rstd (N) saved.
	RMSNorm(y, rstd, x, w View, eps float64)
	// RMSNormBackward writes dx (N, C) and dw (C) where its Buf is not nil.
	RMSNormBackward(dx, dw, dy, x, w, rstd View)

	// RoPE rotates interleaved pairs (x[2k], x[2k+1]) of x (N, T, D),
	// contiguous, by angle (pos0+t)·theta^(−2k/D); inverse rotates by the
	// negative angle (the backward pass).
	RoPE(y, x View, pos0 int, theta float64, inverse bool)

	// Attention computes causal or full scaled-dot-product attention with
	// grouped KV heads. q (B, H, Tq, D), k and v (B, Hkv, Tk, D), out
	// (B, H, Tq, D), lse (B, H, Tq) float32/64 row log-sum-exp of the scaled
	// scores, saved for the backward. All contiguous. No (Tq, Tk) matrix
	// outlives the call.
	Attention(out, lse, q, k, v View, p AttentionParams)
	// AttentionBackward writes dq, dk, dv (overwriting) from the forward's
	// inputs, output, lse and the upstream dout, recomputing probabilities
	// from lse (FlashAttention-2).
	AttentionBackward(dq, dk, dv, q, k, v, out, lse, dout View, p AttentionParams)

	// CrossEntropy writes loss (N), the per-row −log softmax(logits)[target]
	// (0 where target == ignore), and lse (N) the row log-sum-exp; logits
	// (N, V) contiguous, targets Int32 (N).
	CrossEntropy(loss, lse, logits, targets View, ignore int)
	// CrossEntropyBackward writes dlogits = g·scale·(softmax(logits) −
	// onehot(target)), rows with target == ignore set to zero. g is the
	// loss's upstream gradient, a one-element view of lse's dtype read
	// where it lies (a queueing device reads it on the device: the
	// backward never waits for it); a nil Buf means 1.
	CrossEntropyBackward(dlogits, logits, lse, targets, g View, ignore int, scale float64)

	// SumSquares writes Σ src² over every element of src (contiguous) into
	// dst, a one-element view of src's dtype (Float32 for a 16-bit src) at
	// any offset into a larger buffer, so the sums of many tensors can
	// share one buffer and one read. It must be deterministic: the same
	// for any number of workers (the CPU accumulates in float64 over fixed
	// blocks).
	SumSquares(dst, src View)
	// AdamW applies one AdamW update in place to param, m and v from grad,
	// all of one shape and dtype, contiguous (see AdamWParams). Elementwise,
	// so deterministic; the CPU computes each element in float64 and rounds
	// each stored value once.
	AdamW(param, grad, m, v View, p AdamWParams)

	// SwiGLU (KernelSwiGLU) writes y = silu(a)·b = a·sigmoid(a)·b (the gated unit of a
	// SwiGLU MLP); y, a, b have one shape and are contiguous. The result
	// is the unfused composition's: silu(a) rounded to the dtype (float32
	// for 16-bit views), then multiplied by b.
	SwiGLU(y, a, b View)
	// SwiGLUBackward writes da = g·b·silu'(a) and db = g·silu(a) (both
	// overwritten) from the forward's inputs and the upstream g; all one
	// shape, contiguous. Results are the unfused composition's: g·b and
	// silu(a) rounded to the dtype (float32 for 16-bit views) first.
	SwiGLUBackward(da, db, a, b, g View)

	// Softplus (KernelSoftplus) writes y = log(1 + eˣ) elementwise; y and
	// x have one shape and are contiguous. SoftplusBackward writes
	// dx = g·sigmoid(x) from the forward's input and the upstream g (all
	// one shape, contiguous).
	Softplus(y, x View)
	SoftplusBackward(dx, x, g View)

	// MatMulMany (KernelMatMulMany) runs several independent products at
	// once (for example the two gradients of a product in the backward
	// pass, each on its own worker, rather than each split across the
	// workers in turn). The products must not write memory another of
	// them reads or writes. The results are those of calling MatMul on
	// each op in turn, bit for bit.
	MatMulMany(ops []MatMulOp)

	// RoPEStrided (KernelRoPEStrided) is RoPE for an x (…, T, D) of any
	// rank ≥ 2 whose last axis is contiguous (stride 1) and whose other
	// axes have any strides (a head of a fused QKV projection, seen
	// through a permutation); y is contiguous of x's shape. It spares the
	// copy that would make x contiguous first.
	RoPEStrided(y, x View, pos0 int, theta float64, inverse bool)

	// KernelGradClip: global-norm gradient clipping computed on the device
	// and folded into the AdamW update, so that a training step queues its
	// optimizer update without reading the norm back first (on a GPU: one
	// submission and one wait per step). The two passes are
	// deterministic: SumSquares writes the sum of squares of each gradient
	// into one buffer, GradClip adds them in index order.

	// ClipStateDType is the dtype of the clip state for gradients (and
	// sums) of dtype dt: the backend's widest float. The CPU keeps it in
	// Float64, so its coefficient is exactly the float64 a host-side clip
	// computes; Metal, which has no float64, in Float32.
	ClipStateDType(dt DType) DType
	// GradClip adds the n sums of squares in sums (contiguous, the
	// gradients' dtype, Float32 for 16-bit gradients) in index order, in
	// ClipStateDType or wider, and writes the ClipStateLen elements of
	// state (contiguous, ClipStateDType), for gradients that must first be
	// multiplied by unscale (1/loss scale, a power of two; 1 without loss
	// scaling):
	//
	//	state[ClipNorm] = norm = √Σ sums · unscale
	//	state[ClipCoef] = unscale·c with c, skip = ClipFactor(norm, maxNorm)
	//	state[ClipSkip] = skip: 1 when the norm is NaN or ±Inf, else 0
	//
	// maxNorm is ≥ 0 and finite; unscale is > 0 and finite.
	GradClip(state, sums View, maxNorm, unscale float64)
	// AdamWClipped is AdamW with the gradient scaled by a GradClip state:
	// each element reads g = grad·state[ClipCoef], rounded to grad's dtype
	// (what scaling the gradient in place first would store; g itself when
	// the coefficient is 1), then updates param, m and v as AdamW does.
	// When state[ClipSkip] is not 0 it writes nothing. grad is never
	// written.
	AdamWClipped(param, grad, m, v, state View, p AdamWParams)

	// Capabilities is the backend's kernel table: which kernels it runs,
	// on which dtypes. Package forge reads it once, when it opens the
	// device.
	Capabilities() Capabilities

	// Services, each with a default in Unimplemented (defaults.go).

	// Flush submits the kernels queued so far for execution without
	// waiting for them (on Metal, one command buffer), so the device
	// starts on them and the memory they release can be recycled as soon
	// as they complete. A trainer calls it between the micro-batches of a
	// gradient-accumulation step. Default: nothing (a backend that runs
	// kernels as they are called).
	Flush()
	// Recycle returns to the backend's pool, now, the buffers of tensors
	// already dropped, where buffers return only when the garbage
	// collector finds them dead (the CPU), so that the next allocations
	// find them. A trainer calls it between steps, when a step's
	// activations and gradients have all died. Default: nothing.
	Recycle()
	// Describe says in one line the choices made at start-up that the
	// backend's performance depends on (which BLAS library and kernels,
	// which GPU), for the front ends to print wherever they show
	// performance — `forge info`, `:info`, benchmarks, profiles.
	// Default: "".
	Describe() string
	// Variant names the code path of kernel where the backend has several
	// (the CPU's matmul: OpenBLAS or a Go kernel, picked per call by
	// shape): the path its last call took, or before any call the one a
	// large call takes. The profiler asks it right after each call.
	// Default: "".
	Variant(kernel string) string
	// TimeKernels runs launch, which makes one kernel call (it may run
	// several device kernels), with per-kernel timing on, on a device that
	// runs kernels asynchronously with its own clock (Metal), where the
	// host's wall time of a call measures only its encoding: work queued
	// before is finished first and not counted, and each kernel launch
	// runs is submitted on its own and waited for. It returns the device
	// time of the kernels launch ran, summed. If ok is false the device
	// did not time them and the caller measures wall time instead. The
	// dispatch point of package forge uses it while a kernel observer is
	// installed. Default: runs launch and returns ok = false.
	TimeKernels(launch func()) (d time.Duration, ok bool)
	// Memory reports the device memory held by the backend's buffers now
	// and at most since the last ResetPeak, for the per-step memory
	// ledger. Default: zero (not known).
	Memory() MemoryStats
	// ResetPeak starts Memory's peak again from the live bytes now.
	// Default: nothing.
	ResetPeak()
	// AliasHost returns a buffer of dt whose elements are the
	// little-endian bytes of mem, used in place: no copy (a model file
	// mapped into memory becomes the tensor's memory). len(mem) is a
	// multiple of dt.Size(); cap(mem) may reach further, to the end of the
	// last page mem touches, for a device that maps whole pages (Metal's
	// newBufferWithBytesNoCopy). The buffer is read-only: mem may be a
	// read-only mapping, and package forge refuses every kernel that would
	// write it. The backend holds keep until it has released the buffer
	// (freed or collected, and no queued kernel uses it any more): keep
	// owns mem, which must stay mapped and unchanged until then. An error
	// says why mem cannot be used in place (its alignment, the device);
	// the caller then copies. Default: an error (the backend copies).
	AliasHost(dt DType, mem []byte, keep any) (Buffer, error)
	// Concurrent says whether the kernels called from now on are
	// independent of one another: a hint that they may run at the same
	// time (on Metal, in a concurrent-dispatch region of the command
	// buffer), set by package forge around forge.Independent. The hint
	// never changes results: a backend that acts on it still orders a
	// kernel after any earlier one of the region whose memory it reads or
	// writes, where either writes. Default: nothing (kernels run in order).
	Concurrent(on bool)
}

// MemoryStats is a backend's device memory, in bytes. Live and Peak
// count the buffers handed out and not yet freed or collected (the CPU
// counts only buffers of 4096 elements or more: the rest are few bytes);
// Held is what the backend holds from the system, free lists included,
// and Budget the most the device should hold (Metal: the GPU's
// recommended working set; 0: no limit but the system's memory).
type MemoryStats struct {
	Live, Peak, Held, Budget int64
}

// MatMulOp is one product of a MatMulMany call: Dst = A @ B (Dst += A @ B
// with Accumulate), with the operand rules of Backend.MatMul.
type MatMulOp struct {
	Dst, A, B  View
	Accumulate bool
}

// ClipEps is added to the global gradient norm before dividing by it (as
// torch.nn.utils.clip_grad_norm_ does): coef = maxNorm/(norm + ClipEps).
const ClipEps = 1e-6

// ClipFactor is the rule of global-norm clipping to maxNorm (≥ 0; 0 = no
// clipping) for gradients of the given global norm: the factor the
// gradients are scaled by, min(1, maxNorm/(norm + ClipEps)), and skip = 1
// when the norm is NaN or ±Inf (the step is skipped; coef is then 1),
// else 0. Every implementation (host, CPU, Metal) computes this.
func ClipFactor(norm, maxNorm float64) (coef, skip float64) {
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 1, 1
	}
	if maxNorm == 0 {
		return 1, 0
	}
	return min(1, maxNorm/(norm+ClipEps)), 0
}

// Elements of the state GradClip writes (a ClipStateLen-element vector).
const (
	ClipNorm     = 0 // the global L2 norm √Σ sums · unscale
	ClipCoef     = 1 // the scale AdamWClipped applies to the gradient
	ClipSkip     = 2 // 1 when the norm is not finite (no update), else 0
	ClipStateLen = 3
)

// ErrNotImplemented is the panic value of an unimplemented kernel.
type ErrNotImplemented struct {
	Backend, Kernel string
}

func (e ErrNotImplemented) Error() string {
	return fmt.Sprintf("backend %s: kernel %s is not implemented", e.Backend, e.Kernel)
}

var (
	mu       sync.Mutex
	registry = map[string]func() (Backend, error){}
)

// Register makes a backend available by name. open is called at most once,
// on first use; it returns an error when the device is unavailable.
func Register(name string, open func() (Backend, error)) {
	mu.Lock()
	defer mu.Unlock()
	var once sync.Once
	var b Backend
	var err error
	registry[name] = func() (Backend, error) {
		once.Do(func() { b, err = open() })
		return b, err
	}
}

// Open returns the named backend, opening it on first use.
func Open(name string) (Backend, error) {
	mu.Lock()
	open, ok := registry[name]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend %q is not registered (registered: %v)", name, Names())
	}
	return open()
}

// Names lists the registered backends in alphabetical order.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
