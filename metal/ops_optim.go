package metal

// Global-norm gradient clipping on the device (kernels/optim.metal): the
// backend.KernelGradClip that lets a training step queue clip and AdamW
// without reading the norm back, and Flush.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kGradClip     = kernels.Name("grad_clip", "f32")
	kAdamWClipped = kAdamW + ".clipped" // the dispatch label of adamw_f32 with a clip state
)

// gradClipParams mirrors GradClipParams in kernels/optim.metal.
type gradClipParams struct {
	N                     uint32
	MaxNorm, Eps, Unscale float32
}

// ClipStateDType is Float32: Metal has no float64.
func (b *Backend) ClipStateDType(backend.DType) backend.DType { return backend.Float32 }

// GradClip writes the norm, clip coefficient and skip flag of the n sums
// of squares in sums into state (3 float32), in one single-thread kernel
// that adds the sums in order (see kernels/optim.metal), with the loss
// scale's inverse unscale folded into the norm and the coefficient.
func (b *Backend) GradClip(state, sums backend.View, maxNorm, unscale float64) {
	checkKernelDType(kGradClip, onlyF32, state, sums)
	if state.Numel() != backend.ClipStateLen || !state.IsContiguous() || !sums.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: state %v must hold %d contiguous elements and sums %v (strides %v) be contiguous",
			kGradClip, state.Shape, backend.ClipStateLen, sums.Shape, sums.Strides))
	}
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		panic(fmt.Sprintf("metal: %s: max norm %v must be finite and ≥ 0", kGradClip, maxNorm))
	}
	if !(unscale > 0) || math.IsInf(unscale, 0) {
		panic(fmt.Sprintf("metal: %s: unscale %v must be finite and > 0", kGradClip, unscale))
	}
	n := sums.Numel()
	checkCount(kGradClip, n)
	sv := sums
	if n == 0 { // bind something: the kernel reads no sum
		sv = state
	}
	b.run(kGradClip, pkey(kGradClip), [3]int{1, 1, 1}, [3]int{1, 1, 1}, b.arg(state), b.arg(sv),
		bytesArg(gradClipParams{N: uint32(n), MaxNorm: float32(maxNorm), Eps: backend.ClipEps, Unscale: float32(unscale)}))
}

// AdamWClipped applies one AdamW update in place to param, m and v from
// grad scaled by state[ClipCoef], writing nothing when state[ClipSkip] is
// set; all float32, contiguous, of one shape. It is AdamW's kernel (the
// float-float arithmetic, within rounding ties of the CPU) with the clip
// state read on the device.
func (b *Backend) AdamWClipped(param, grad, m, v, state backend.View, p backend.AdamWParams) {
	if state.Buf == nil {
		panic(fmt.Sprintf("metal: %s: no clip state", kAdamWClipped))
	}
	b.adamw(param, grad, m, v, state, p)
}

// Flush commits the current command buffer without waiting for it
// (Backend.Flush): the device starts on the work queued so far.
func (b *Backend) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}
