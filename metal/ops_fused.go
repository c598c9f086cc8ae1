package metal

// SwiGLU, SwiGLUBackward, SumSquares and AdamW (kernels/fused.metal).
//
// SwiGLU and SwiGLUBackward also run on float16 and bfloat16 views (all of
// one dtype: float32 math, each output rounded once), SumSquares on a
// float16 or bfloat16 src (float32 dst); AdamW is float32 only.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
)

var (
	kSwiGLUBy     = namesByDType("swiglu")
	kSwiGLUBackBy = namesByDType("swiglu", "backward")
	kSumSquaresBy = namesByDType("sum_squares")
	kAdamW        = kernels.Name("adamw", "f32")

	// The ops' names in panics: their float32 kernels.
	kSwiGLU     = kSwiGLUBy[backend.Float32]
	kSwiGLUBack = kSwiGLUBackBy[backend.Float32]
	kSumSquares = kSumSquaresBy[backend.Float32]

	// SumSquares' dispatch labels: the first pass over several blocks, the
	// second.
	sumSquaresBlocksLabels = withSuffix(kSumSquaresBy, ".blocks")
	sumSquaresTotalLabel   = kSumSquares + ".total"

	// SumSquares' pipelines: the first pass (constant 0: square) by src
	// dtype, the second (add the partials).
	sumSquaresKeys = func() (k [backend.BFloat16 + 1]driver.PipelineKey) {
		for _, dt := range floatTypes {
			k[dt] = pkey(kSumSquaresBy[dt], cBool(0, true))
		}
		return k
	}()
	sumSquaresAddKey = pkey(kSumSquares, cBool(0, false))

	// adamw_f32's pipelines without and with the clip state (constant 1),
	// by the vector loop (constant 2: adamwKeys[clipped][vec]).
	adamwKeys = [2][2]driver.PipelineKey{
		{pkey(kAdamW, cBool(1, false), cBool(2, false)), pkey(kAdamW, cBool(1, false), cBool(2, true))},
		{pkey(kAdamW, cBool(1, true), cBool(2, false)), pkey(kAdamW, cBool(1, true), cBool(2, true))},
	}
)

// fusedKernels lists the kernels of this file by dtype (for the tests).
var fusedKernels = allNames(kSwiGLUBy, kSwiGLUBackBy, kSumSquaresBy)

// fusedParams mirrors FusedParams in kernels/fused.metal.
type fusedParams struct {
	N uint32
}

// checkFused panics unless every view is float32, contiguous and of the
// first one's element count; it returns that count.
func checkFused(kernel string, views ...backend.View) int {
	checkKernelDType(kernel, onlyF32, views...)
	return checkFusedShapes(kernel, views...)
}

// checkFused16 is checkFused for the kernels that also take float16 and
// bfloat16: every view float32, float16 or bfloat16, all of one dtype,
// which it returns with the count.
func checkFused16(kernel string, views ...backend.View) (int, backend.DType) {
	dt := floatDType(kernel, views...)
	return checkFusedShapes(kernel, views...), dt
}

// checkFusedShapes panics unless every view is contiguous and of the first
// one's element count; it returns that count.
func checkFusedShapes(kernel string, views ...backend.View) int {
	n := views[0].Numel()
	for _, v := range views {
		if v.Buf == nil {
			panic(fmt.Sprintf("metal: %s: missing operand", kernel))
		}
		if v.Numel() != n {
			panic(fmt.Sprintf("metal: %s: element counts differ: %v and %v", kernel, views[0].Shape, v.Shape))
		}
		if !v.IsContiguous() {
			panic(fmt.Sprintf("metal: %s: view %v with strides %v is not contiguous", kernel, v.Shape, v.Strides))
		}
	}
	checkCount(kernel, n)
	return n
}

// SwiGLU writes y = silu(a)·b, with silu(a) rounded to float32 first (the
// unfused composition's result on this backend, bit for bit). float16 and
// bfloat16 views (all of one dtype) are widened, computed the same way in
// float32 and y rounded once (silu(a) is not rounded to 16 bits).
func (b *Backend) SwiGLU(y, a, bv backend.View) {
	n, dt := checkFused16(kSwiGLU, y, a, bv)
	if n == 0 {
		return
	}
	kernel := kSwiGLUBy[dt]
	b.runEW(kernel, pkey(kernel), n, b.arg(y), b.arg(a), b.arg(bv), bytesArg(fusedParams{uint32(n)}))
}

// SwiGLUBackward writes da = g·b·silu'(a) and db = g·silu(a), with g·b and
// silu(a) rounded to float32 first (the unfused composition's results).
// float16 and bfloat16 views (all of one dtype) are widened, computed the
// same way in float32 and da, db rounded once.
func (b *Backend) SwiGLUBackward(da, db, a, bv, g backend.View) {
	n, dt := checkFused16(kSwiGLUBack, da, db, a, bv, g)
	if n == 0 {
		return
	}
	kernel := kSwiGLUBackBy[dt]
	b.runEW(kernel, pkey(kernel), n, b.arg(da), b.arg(db), b.arg(a), b.arg(bv), b.arg(g),
		bytesArg(fusedParams{uint32(n)}))
}

// sumSqParams mirrors SumSqParams in kernels/fused.metal.
type sumSqParams struct {
	N, Block uint32
}

// sumSqBlock is the number of elements one threadgroup of the first pass
// sums. The blocks fix the order of the additions (with the threadgroup
// size, a function of the element count and the device only).
const sumSqBlock = 1 << 14

// SumSquares writes Σ src² (src float32, float16 or bfloat16, contiguous)
// into the one-element float32 view dst (any offset): per-block
// compensated partial sums, then the partials in block order —
// deterministic. A 16-bit src is widened (its squares are then exact in
// float32).
func (b *Backend) SumSquares(dst, src backend.View) {
	checkKernelDType(kSumSquares, floatTypes, src)
	checkKernelDType(kSumSquares, onlyF32, dst)
	sdt := src.DType()
	pass1 := kSumSquaresBy[sdt]
	if dst.Numel() != 1 {
		panic(fmt.Sprintf("metal: %s: dst %v must hold one element", kSumSquares, dst.Shape))
	}
	if !src.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: src %v with strides %v is not contiguous", kSumSquares, src.Shape, src.Strides))
	}
	n := src.Numel()
	one := backend.View{Buf: dst.Buf, Offset: dst.Offset, Shape: []int{1}, Strides: []int{1}}
	if n == 0 {
		b.Fill(one, 0)
		return
	}
	checkCount(pass1, n)
	sq, add := sumSquaresKeys[sdt], sumSquaresAddKey
	nb := (n + sumSqBlock - 1) / sumSqBlock
	p1, t1 := b.rowThreadsFor(sq, min(n, sumSqBlock), 256)
	if nb == 1 {
		b.runPipe(pass1, sq, p1, [3]int{1, 1, 1}, [3]int{t1, 1, 1}, b.arg(one), b.arg(src),
			bytesArg(sumSqParams{uint32(n), sumSqBlock}))
		return
	}
	part := b.Alloc(backend.Float32, nb)
	b.runPipe(sumSquaresBlocksLabels[sdt], sq, p1, [3]int{nb, 1, 1}, [3]int{t1, 1, 1}, b.arg(backend.View{Buf: part}), b.arg(src),
		bytesArg(sumSqParams{uint32(n), sumSqBlock}))
	// The second pass reads what the first wrote: in a concurrent region
	// it waits for the region's other first passes (one barrier for all
	// of them, not one per tensor), and part is freed once it is encoded.
	p2, t2 := b.rowThreadsFor(add, nb, 1024)
	d, _ := checkDispatch(sumSquaresTotalLabel, add, p2, [3]int{1, 1, 1}, [3]int{t2, 1, 1},
		[]kernelArg{b.arg(one), b.arg(backend.View{Buf: part}), bytesArg(sumSqParams{uint32(nb), uint32(nb)})})
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deferLocked(d, part.(*Buffer))
}

// adamwParams mirrors AdamWParams in kernels/fused.metal: every
// coefficient as a float32 pair whose sum is the float64 value.
type adamwParams struct {
	N, Pad                                   uint32
	B1, C1, B2, C2, IBC2, Eps, Decay, StepSz [2]float32
}

// splitF64 returns hi + lo = x to about 48 bits.
func splitF64(x float64) [2]float32 {
	hi := float32(x)
	if math.IsInf(float64(hi), 0) || math.IsNaN(x) {
		return [2]float32{hi, 0}
	}
	return [2]float32{hi, float32(x - float64(hi))}
}

// AdamW applies one AdamW update in place to param, m and v from grad (all
// float32, contiguous, one shape). The arithmetic is float-float, so each
// stored value is the CPU's float64 result rounded once, except at rare
// rounding ties (see kernels/fused.metal).
func (b *Backend) AdamW(param, grad, m, v backend.View, p backend.AdamWParams) {
	b.adamw(param, grad, m, v, backend.View{}, p)
}

// adamw runs adamw_f32 on param, grad, m and v (float32, contiguous, of
// one size), reading the clip state state (scale and skip, constant
// adamw_clipped) when its Buf is not nil.
func (b *Backend) adamw(param, grad, m, v, state backend.View, p backend.AdamWParams) {
	if p.Step < 1 {
		panic(fmt.Sprintf("metal: %s: step %d must be ≥ 1", kAdamW, p.Step))
	}
	n := checkFused(kAdamW, param, grad, m, v)
	clipped := state.Buf != nil
	if clipped {
		checkKernelDType(kAdamW, onlyF32, state)
		if state.Numel() != backend.ClipStateLen || !state.IsContiguous() {
			panic(fmt.Sprintf("metal: %s: clip state %v must hold %d contiguous elements", kAdamW, state.Shape, backend.ClipStateLen))
		}
	}
	if n == 0 {
		return
	}
	t := float64(p.Step)
	ap := adamwParams{
		N:      uint32(n),
		B1:     splitF64(p.Beta1),
		C1:     splitF64(1 - p.Beta1),
		B2:     splitF64(p.Beta2),
		C2:     splitF64(1 - p.Beta2),
		IBC2:   splitF64(1 / math.Sqrt(1-math.Pow(p.Beta2, t))),
		Eps:    splitF64(p.Eps),
		Decay:  splitF64(1 - p.LR*p.WeightDecay),
		StepSz: splitF64(p.LR / (1 - math.Pow(p.Beta1, t))),
	}
	label := kAdamW
	if clipped {
		label = kAdamWClipped
	}
	// param, grad, m and v are contiguous (checkFused): the vector loop
	// needs them 16-byte aligned, as one run of ≥ 4 elements.
	args := [4]kernelArg{b.arg(param), b.arg(grad), b.arg(m), b.arg(v)}
	vec := ewVec4(layout{shape: []int{n}, strides: [][]int{{1}, {1}, {1}, {1}}}, 4, args[:])
	// Unclipped, buffer 5 is bound to a placeholder the kernel never reads.
	b.runEW(label, adamwKeys[b2i(clipped)][b2i(vec)], ewVec4Threads(n, vec), args[0], args[1], args[2], args[3],
		bytesArg(ap), b.arg(state))
}

// b2i is 1 for true, 0 for false (an index).
func b2i(x bool) int {
	if x {
		return 1
	}
	return 0
}
