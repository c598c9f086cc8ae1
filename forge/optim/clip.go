package optim

import (
	"math"

	"github.com/forgeml/forge/forge"
)

// ClipGradNorm clips the gradients of params to a global L2 norm of at most
// maxNorm and returns their norm before clipping, like
// torch.nn.utils.clip_grad_norm_: the norm is taken over all gradients as
// one vector, and when it exceeds maxNorm every gradient is multiplied in
// place by maxNorm/(norm + 1e-6). Parameters without a gradient are
// ignored. A non-finite norm is returned as is and leaves the gradients
// unchanged (the caller decides whether to skip the step).
//
// The norm is read back to the host once per (device, dtype) of the
// gradients.
func ClipGradNorm(params []*forge.Tensor, maxNorm float64) float64 {
	if !(maxNorm > 0) {
		panic(errorf("clip_grad_norm", "max norm must be > 0, got %v", maxNorm))
	}
	c := ClipGradNormDeferred(params, maxNorm) // the one clipping rule
	norm, coef := c.Norm(), c.Coef()
	if c.Skipped() || coef == 1 {
		return norm
	}
	forge.WithPhase(forge.PhaseOptimizer, func() {
		forge.NoGrad(func() {
			for _, p := range params {
				if g := p.Grad(); g != nil {
					g.MulScalarInPlace(coef)
				}
			}
		})
	})
	return norm
}

// GradNorm returns the global L2 norm of params' gradients (those that
// have one), without changing them. Each gradient's sum of squares is one
// fused kernel (forge.SumSquaresOf); the sums are read back once per
// (device, dtype) and added in float64 in the order of params.
func GradNorm(params []*forge.Tensor) float64 {
	var grads []*forge.Tensor
	for _, p := range params {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	var sums []float64
	forge.WithPhase(forge.PhaseOptimizer, func() {
		forge.NoGrad(func() { sums = forge.SumSquaresOf(grads) })
	})
	total := 0.0
	for _, s := range sums {
		total += s
	}
	return math.Sqrt(total)
}

// ClipGradNormDeferred starts global-norm clipping of params' gradients
// (those that have one) to maxNorm without reading anything back and
// without changing the gradients: the norm and the coefficient are
// computed on the device (forge.NewGradClip) and AdamW.StepClipped folds
// the coefficient into its update, skipping it when the norm is not
// finite. maxNorm 0 computes the norm (and the skip flag) only. Read
// Norm and Skipped after queueing the step, so that a training step waits
// once. The results are ClipGradNorm's followed by Step (on the CPU bit
// for bit), except that the gradients are left as they are (not clipped).
func ClipGradNormDeferred(params []*forge.Tensor, maxNorm float64) *forge.GradClip {
	return ClipGradNormDeferredScaled(params, maxNorm, 1)
}

// ClipGradNormDeferredScaled is ClipGradNormDeferred for the gradients of
// a loss multiplied by lossScale (float16's dynamic loss scaling): the
// clip and the update act on the gradients divided by lossScale, with no
// pass over them to unscale (forge.NewGradClipScaled); the gradient
// tensors keep their scaled values.
func ClipGradNormDeferredScaled(params []*forge.Tensor, maxNorm, lossScale float64) *forge.GradClip {
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		panic(errorf("clip_grad_norm", "max norm must be finite and ≥ 0, got %v", maxNorm))
	}
	var grads []*forge.Tensor
	for _, p := range params {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	var c *forge.GradClip
	forge.WithPhase(forge.PhaseOptimizer, func() {
		forge.NoGrad(func() { c = forge.NewGradClipScaled(grads, maxNorm, lossScale) })
	})
	return c
}
