package metal

// Global-norm gradient clipping on the device (kernels/optim.metal): the
// backend.GradClipper that lets a training step queue clip and AdamW
// without reading the norm back, and Flush.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kGradClip     = kernels.Name("grad_clip", "f32")
	kAdamWClipped = kernels.Name("adamw", "clipped", "f32")
)

// gradClipParams mirrors GradClipParams in kernels/optim.metal.
type gradClipParams struct {
	N                     uint32
	MaxNorm, Eps, Unscale float32
}

// adamwClippedParams mirrors AdamWClippedParams in kernels/optim.metal.
type adamwClippedParams struct {
	N                                          uint32
	B1, C1, B2, C2, IBC2, Eps, Decay, StepSize float32
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
// set; all float32, contiguous, of one shape.
func (b *Backend) AdamWClipped(param, grad, m, v, state backend.View, p backend.AdamWParams) {
	checkKernelDType(kAdamWClipped, onlyF32, param, grad, m, v, state)
	if p.Step < 1 {
		panic(fmt.Sprintf("metal: %s: step %d must be ≥ 1", kAdamWClipped, p.Step))
	}
	n := param.Numel()
	for _, x := range []backend.View{param, grad, m, v} {
		if x.Buf == nil || x.Numel() != n || !x.IsContiguous() {
			panic(fmt.Sprintf("metal: %s: param %v, grad %v, m %v, v %v must be contiguous, of one size",
				kAdamWClipped, param.Shape, grad.Shape, m.Shape, v.Shape))
		}
	}
	if state.Numel() != backend.ClipStateLen || !state.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: clip state %v must hold %d contiguous elements", kAdamWClipped, state.Shape, backend.ClipStateLen))
	}
	if n == 0 {
		return
	}
	checkCount(kAdamWClipped, n)
	t := float64(p.Step)
	ap := adamwClippedParams{
		N:  uint32(n),
		B1: float32(p.Beta1), C1: float32(1 - p.Beta1),
		B2: float32(p.Beta2), C2: float32(1 - p.Beta2),
		IBC2:     float32(1 / math.Sqrt(1-math.Pow(p.Beta2, t))),
		Eps:      float32(p.Eps),
		Decay:    float32(1 - p.LR*p.WeightDecay),
		StepSize: float32(p.LR / (1 - math.Pow(p.Beta1, t))),
	}
	key := pkey(kAdamWClipped)
	groups, threads := b.ewGrid(key, n)
	b.run(kAdamWClipped, key, groups, threads, b.arg(param), b.arg(grad), b.arg(m), b.arg(v), b.arg(state), bytesArg(ap))
}

// Flush commits the current command buffer without waiting for it
// (backend.Flusher): the device starts on the work queued so far.
func (b *Backend) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}
