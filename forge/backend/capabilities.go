package backend

import (
	"fmt"
	"sort"
	"strings"
)

// Kernel names, as a backend's Capabilities lists them and as the
// profiler records them. A name covers a kernel's forward and its backward
// ("swiglu" is SwiGLU and SwiGLUBackward).
const (
	KernelFill   = "fill"
	KernelCopy   = "copy"
	KernelUnary  = "unary" // Unary and UnaryGrad
	KernelBinary = "binary"
	KernelWhere  = "where"
	KernelReduce = "reduce"
	KernelMatMul = "matmul"
	KernelIndex  = "index" // IndexSelect, IndexAdd, Gather, ScatterAdd

	// The kernels below are optional: package forge composes each from
	// the kernels above when a backend's Capabilities does not list it
	// (forge/composed.go), and forgetest's TestComposed holds the
	// compositions to the references the kernels meet. A new backend
	// trains a model with the eight kernels above.

	// KernelSoftmax is Softmax and SoftmaxBackward; composed as
	// exp(x − max) / Σ exp(x − max) (log: x − max − log Σ exp(x − max)).
	KernelSoftmax = "softmax"
	// KernelLayerNorm is LayerNorm and LayerNormBackward; composed from
	// means over the last axis.
	KernelLayerNorm = "layernorm"
	// KernelRMSNorm is RMSNorm and RMSNormBackward; composed likewise.
	KernelRMSNorm = "rmsnorm"
	// KernelRoPE is RoPE; composed as the pairs' rotation by cosine and
	// sine tables computed on the host.
	KernelRoPE = "rope"
	// KernelAttention is Attention and AttentionBackward; composed as
	// softmax(q·kᵀ·scale (masked))·v, the scores materialised.
	KernelAttention = "attention"
	// KernelCrossEntropy is CrossEntropy and CrossEntropyBackward;
	// composed as the log-softmax gathered at the targets.
	KernelCrossEntropy = "cross_entropy"
	// KernelSumSquares is SumSquares; composed as Σ x·x by Reduce.
	KernelSumSquares = "sum_squares"
	// KernelAdamW is AdamW; composed from elementwise ops written in place.
	KernelAdamW = "adamw"

	// KernelSwiGLU is SwiGLU and SwiGLUBackward; composed as a.SiLU().Mul(b).
	KernelSwiGLU = "swiglu"
	// KernelSoftplus is Softplus and SoftplusBackward; composed as
	// max(x, 0) + log(1 + exp(−|x|)).
	KernelSoftplus = "softplus"
	// KernelMatMulMany is MatMulMany; composed as MatMul on each product
	// in turn.
	KernelMatMulMany = "matmul_many"
	// KernelRoPEStrided is RoPEStrided; composed as a contiguous copy of
	// x, then RoPE.
	KernelRoPEStrided = "rope.strided"
	// KernelAttentionRowStrided says Attention and AttentionBackward take
	// q, k, v, out and dout with contiguous rows but any other strides
	// ((B, H, T, D) views with stride 1 on D and any non-negative strides
	// on B, H and T: heads of a fused QKV projection, or an output laid
	// out as (B, T, H, D)); lse, dq, dk and dv stay contiguous. Without
	// it forge copies those operands contiguous first.
	KernelAttentionRowStrided = "attention.row_strided"
	// KernelGradClip is ClipStateDType, GradClip and AdamWClipped:
	// global-norm clipping computed on the device and folded into the
	// AdamW update, so a step queues its update without reading the norm
	// back first (on a GPU: one submission and one wait per step).
	// Composed as SumSquares read back, the clip factor computed on the
	// host, then AdamW on scaled gradients.
	KernelGradClip = "grad_clip"
)

// DTypes is a set of dtypes.
type DTypes uint8

// DTypesOf returns the set of the given dtypes.
func DTypesOf(dts ...DType) DTypes {
	var s DTypes
	for _, dt := range dts {
		s |= 1 << dt
	}
	return s
}

// Has reports whether dt is in the set.
func (s DTypes) Has(dt DType) bool { return dt < 8 && s&(1<<dt) != 0 }

// List returns the set's dtypes in their numeric order.
func (s DTypes) List() []DType {
	var out []DType
	for dt := DType(0); dt < 8; dt++ {
		if s.Has(dt) {
			out = append(out, dt)
		}
	}
	return out
}

func (s DTypes) String() string {
	var names []string
	for _, dt := range s.List() {
		names = append(names, dt.String())
	}
	return strings.Join(names, ", ")
}

// Capabilities is what a backend computes: each kernel it runs (by the
// names above) and the dtypes it takes there — for a kernel of several
// operands, the dtype of the data operands (statistics, indices and
// masks are as the kernel's documentation says). A required kernel a
// backend runs in no dtype is absent; an optional kernel absent from the
// table is composed by package forge from the required ones.
//
// Storage kernels (Fill, Copy, Write, Read) take every dtype the backend
// stores, which the table says under KernelCopy.
type Capabilities map[string]DTypes

// Has reports whether the backend runs kernel on dtype dt.
func (c Capabilities) Has(kernel string, dt DType) bool { return c[kernel].Has(dt) }

// Kernels returns the kernel names in the table, sorted.
func (c Capabilities) Kernels() []string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Without returns a copy of c without the named kernels.
func (c Capabilities) Without(kernels ...string) Capabilities {
	out := make(Capabilities, len(c))
	for k, v := range c {
		out[k] = v
	}
	for _, k := range kernels {
		delete(out, k)
	}
	return out
}

// String lists the table, one "kernel: dtypes" per line, sorted.
func (c Capabilities) String() string {
	var b strings.Builder
	for _, k := range c.Kernels() {
		fmt.Fprintf(&b, "%s: %v\n", k, c[k])
	}
	return b.String()
}

// OptionalKernels lists the kernels package forge composes when a
// backend's Capabilities does not list them.
var OptionalKernels = []string{KernelSoftmax, KernelLayerNorm, KernelRMSNorm, KernelRoPE,
	KernelAttention, KernelCrossEntropy, KernelSumSquares, KernelAdamW, KernelSwiGLU,
	KernelSoftplus, KernelMatMulMany, KernelRoPEStrided, KernelAttentionRowStrided, KernelGradClip}
