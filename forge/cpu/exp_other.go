//go:build !amd64 || purego

package cpu

// Where the assembly does not build, the portable kernels of exp.go.

// expKernelSet is one implementation of the three slice kernels.
type expKernelSet struct {
	name     string
	shiftSum func(dst, src []float32, shift, scale float64) float64
	shift64  func(dst []float64, src []float32, shift float64)
	sigmoid  func(op int, dst, x, g []float32)
}

// expKernelSets lists the implementations this CPU runs: the portable one.
func expKernelSets() []expKernelSet { return []expKernelSet{expGoSet} }

// expShiftSum32 computes e_i = exp(float64(src[i]) − shift) in float64,
// writes dst[i] = float32(scale·e_i) unless dst is nil, and returns Σ e_i
// (the unrounded values). dst may alias src and must be at least as long.
func expShiftSum32(dst, src []float32, shift, scale float64) float64 {
	return expShiftSumGo(dst, src, shift, scale)
}

// expShift64 writes dst[i] = exp(float64(src[i]) − shift) in float64.
func expShift64(dst []float64, src []float32, shift float64) {
	expShift64Go(dst, src, shift)
}

// sigmoid32 computes the exp-based op (one of the sig* constants) of x into
// dst, len(dst) elements, with the upstream gradient g for the gradient ops
// (nil otherwise). dst may alias x or g.
func sigmoid32(op int, dst, x, g []float32) {
	sigmoid32Go(op, dst, x, g)
}

// swiglu32Fused reports false: the portable composition runs.
func swiglu32Fused(y, a, b []float32) bool { return false }

// swigluBackward32Fused reports false: the portable composition runs.
func swigluBackward32Fused(da, db, a, b, g []float32) bool { return false }
