//go:build amd64 && !purego

package cpu

import xcpu "golang.org/x/sys/cpu"

// The assembly exp kernels: AVX-512 (exp_avx512_amd64.s) where the CPU has
// AVX512F and AVX512VL, else AVX2 with FMA (exp_amd64.s), else the
// portable ones of exp.go. x/sys/cpu also checks that the OS saves the
// vector registers.
var (
	expAVX2   = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA
	expAVX512 = expAVX2 && xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512VL
)

// The kernels take n ≥ 1 elements; dst may be nil for expShiftSum (sum
// only); gr is read by the gradient ops only but must be readable for all.

//go:noescape
func expShiftSumAVX2(dst, src *float32, n int, shift, scale float64) (sum float64)

//go:noescape
func expShift64AVX2(dst *float64, src *float32, n int, shift float64)

//go:noescape
func sigmoid32AVX2(op int, dst, x, gr *float32, n int)

//go:noescape
func expShiftSumAVX512(dst, src *float32, n int, shift, scale float64) (sum float64)

//go:noescape
func expShift64AVX512(dst *float64, src *float32, n int, shift float64)

//go:noescape
func sigmoid32AVX512(op int, dst, x, gr *float32, n int)

// expKernelSet is one implementation of the three slice kernels.
type expKernelSet struct {
	name     string
	shiftSum func(dst, src []float32, shift, scale float64) float64
	shift64  func(dst []float64, src []float32, shift float64)
	sigmoid  func(op int, dst, x, g []float32)
}

// expAsmSet wraps the assembly kernels of one instruction set.
func expAsmSet(name string,
	shiftSum func(dst, src *float32, n int, shift, scale float64) float64,
	shift64 func(dst *float64, src *float32, n int, shift float64),
	sigmoid func(op int, dst, x, gr *float32, n int)) expKernelSet {
	return expKernelSet{
		name: name,
		shiftSum: func(dst, src []float32, shift, scale float64) float64 {
			if len(src) == 0 {
				return 0
			}
			var d *float32
			if dst != nil {
				d = &dst[:len(src)][0]
			}
			return shiftSum(d, &src[0], len(src), shift, scale)
		},
		shift64: func(dst []float64, src []float32, shift float64) {
			if len(src) > 0 {
				shift64(&dst[:len(src)][0], &src[0], len(src), shift)
			}
		},
		sigmoid: func(op int, dst, x, g []float32) {
			n := len(dst)
			if n == 0 {
				return
			}
			if op < sigSigmoid || op > sigGELUGrad {
				panic("cpu: sigmoid32: bad op")
			}
			xp := &x[:n][0]
			gp := xp
			if op >= sigSiLUGrad {
				gp = &g[:n][0]
			}
			sigmoid(op, &dst[0], xp, gp, n)
		},
	}
}

// expKernelSets lists the implementations this CPU runs, fastest first;
// the first is the one in use.
func expKernelSets() []expKernelSet {
	var sets []expKernelSet
	if expAVX512 {
		sets = append(sets, expAsmSet("avx512", expShiftSumAVX512, expShift64AVX512, sigmoid32AVX512))
	}
	if expAVX2 {
		sets = append(sets, expAsmSet("avx2", expShiftSumAVX2, expShift64AVX2, sigmoid32AVX2))
	}
	return append(sets, expGoSet)
}

var expUse = expKernelSets()[0]

// expShiftSum32 computes e_i = exp(float64(src[i]) − shift) in float64,
// writes dst[i] = float32(scale·e_i) unless dst is nil, and returns Σ e_i
// (the unrounded values, summed in an order that depends only on
// len(src)). dst may alias src and must be at least as long.
func expShiftSum32(dst, src []float32, shift, scale float64) float64 {
	return expUse.shiftSum(dst, src, shift, scale)
}

// expShift64 writes dst[i] = exp(float64(src[i]) − shift) in float64.
func expShift64(dst []float64, src []float32, shift float64) {
	expUse.shift64(dst, src, shift)
}

// sigmoid32 computes the exp-based op (one of the sig* constants) of x into
// dst, len(dst) elements, with the upstream gradient g for the gradient ops
// (nil otherwise). dst may alias x or g.
func sigmoid32(op int, dst, x, g []float32) {
	expUse.sigmoid(op, dst, x, g)
}

//go:noescape
func swiglu32AVX512(y, a, b *float32, n int)

//go:noescape
func swigluBackward32AVX512(da, db, a, b, gr *float32, n int)

// swiglu32Fused writes y = float32(silu(a))·b in one AVX-512 pass, the
// bits of the composition with the AVX-512 sigmoid32, and reports whether
// it ran (only while that is the exp kernel set in use).
func swiglu32Fused(y, a, b []float32) bool {
	if expUse.name != "avx512" {
		return false
	}
	if n := len(a); n > 0 {
		swiglu32AVX512(&y[:n][0], &a[0], &b[:n][0], n)
	}
	return true
}

// swigluBackward32Fused is swiglu32Fused for the backward: da and db.
func swigluBackward32Fused(da, db, a, b, g []float32) bool {
	if expUse.name != "avx512" {
		return false
	}
	if n := len(a); n > 0 {
		swigluBackward32AVX512(&da[:n][0], &db[:n][0], &a[0], &b[:n][0], &g[:n][0], n)
	}
	return true
}
