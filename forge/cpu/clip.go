package cpu

// Global-norm gradient clipping folded into AdamW (backend.KernelGradClip).
//
// The state is float64 whatever the gradients' dtype, and GradClip adds the
// per-tensor sums in float64 in index order, so the norm and the
// coefficient are exactly the float64s a host-side clip computes from the
// same sums (optim.ClipGradNorm), and AdamWClipped scales each gradient
// element as the in-place Affine scaling did (T(coef·g)), so a training
// step gives the bits it gave when clipping scaled the gradients first.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

var _ = declare(backend.KernelGradClip, computed)

// ClipStateDType is Float64: the CPU has it.
func (be *Backend) ClipStateDType(backend.DType) backend.DType { return backend.Float64 }

// GradClip writes the norm, the clip coefficient and the skip flag of the
// sums of squares in sums (see Backend.GradClip) into state (float64).
func (be *Backend) GradClip(state, sums backend.View, maxNorm, unscale float64) {
	if state.DType() != backend.Float64 || state.Numel() != backend.ClipStateLen || !state.IsContiguous() {
		panic(fmt.Sprintf("cpu: grad_clip: state must be %d contiguous float64, got %v %v", backend.ClipStateLen, state.DType(), state.Shape))
	}
	if !sums.IsContiguous() {
		panic(fmt.Sprintf("cpu: grad_clip: sums %v with strides %v is not contiguous", sums.Shape, sums.Strides))
	}
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		panic(fmt.Sprintf("cpu: grad_clip: max norm %v must be finite and ≥ 0", maxNorm))
	}
	if !(unscale > 0) || math.IsInf(unscale, 0) {
		panic(fmt.Sprintf("cpu: grad_clip: unscale %v must be finite and > 0", unscale))
	}
	n := sums.Numel()
	total := 0.0
	switch sums.DType() {
	case backend.Float32:
		for _, s := range f32(sums)[:n] {
			total += float64(s)
		}
	case backend.Float64:
		for _, s := range f64(sums)[:n] {
			total += s
		}
	default:
		panic(badDType("grad_clip", sums.DType()))
	}
	norm := math.Sqrt(total) * unscale
	coef, skip := backend.ClipFactor(norm, maxNorm)
	st := f64(state)[:backend.ClipStateLen]
	st[backend.ClipNorm], st[backend.ClipCoef], st[backend.ClipSkip] = norm, unscale*coef, skip
}

// AdamWClipped applies one AdamW update to param, m and v in place from
// grad scaled by state[ClipCoef], unless state[ClipSkip] is set.
func (be *Backend) AdamWClipped(param, grad, m, v, state backend.View, p backend.AdamWParams) {
	if p.Step < 1 {
		panic(fmt.Sprintf("cpu: adamw: step %d must be ≥ 1", p.Step))
	}
	dt := checkSame("adamw", param, grad, m, v)
	if state.DType() != backend.Float64 || state.Numel() != backend.ClipStateLen {
		panic(fmt.Sprintf("cpu: adamw: clip state must be %d float64, got %v %v", backend.ClipStateLen, state.DType(), state.Shape))
	}
	st := f64(state)[:backend.ClipStateLen]
	if st[backend.ClipSkip] != 0 {
		return
	}
	coef := st[backend.ClipCoef]
	switch {
	case coef == 1 && dt == backend.Float32:
		adamw[float32](be, param, grad, m, v, p)
	case coef == 1:
		adamw[float64](be, param, grad, m, v, p)
	case dt == backend.Float32:
		adamwScaled[float32](be, param, grad, m, v, coef, p)
	default:
		adamwScaled[float64](be, param, grad, m, v, coef, p)
	}
}

// adamwScaled is adamw on T(coef·grad): each block of the scaled gradient
// is staged in a stack buffer and handed to adamwSlice (the AVX-512 kernel
// for float32), so the update is the unfused one's bit for bit.
func adamwScaled[T Float](be *Backend, pv, gv, mv, vv backend.View, coef float64, p backend.AdamWParams) {
	n := pv.Numel()
	w, g := floats[T](pv)[:n], floats[T](gv)[:n]
	m, v := floats[T](mv)[:n], floats[T](vv)[:n]
	c := newAdamWCoefs(p)
	be.parallelFor(n, 25, func(lo, hi int) {
		var sg [fusedBlock]T
		for j := lo; j < hi; j += fusedBlock {
			e := min(j+fusedBlock, hi)
			s := sg[:e-j]
			for i, x := range g[j:e] {
				s[i] = T(coef*float64(x) + 0) // the Affine of in-place scaling: coef·x + 0
			}
			adamwSlice(c, w[j:e], s, m[j:e], v[j:e])
		}
	})
}
