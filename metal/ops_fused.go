package metal

// SwiGLU, SwiGLUBackward, SumSquares and AdamW (kernels/fused.metal).

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kSwiGLU     = kernels.Name("swiglu", "f32")
	kSwiGLUBack = kernels.Name("swiglu", "backward", "f32")
	kSumSquares = kernels.Name("sum_squares", "f32")
	kAdamW      = kernels.Name("adamw", "f32")
)

// fusedParams mirrors FusedParams in kernels/fused.metal.
type fusedParams struct {
	N uint32
}

// checkFused panics unless every view is float32, contiguous and of the
// first one's element count; it returns that count.
func checkFused(kernel string, views ...backend.View) int {
	checkKernelDType(kernel, onlyF32, views...)
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
// unfused composition's result on this backend, bit for bit).
func (b *Backend) SwiGLU(y, a, bv backend.View) {
	n := checkFused(kSwiGLU, y, a, bv)
	if n == 0 {
		return
	}
	key := pkey(kSwiGLU)
	groups, threads := b.ewGrid(key, n)
	b.run(kSwiGLU, key, groups, threads, b.arg(y), b.arg(a), b.arg(bv), bytesArg(fusedParams{uint32(n)}))
}

// SwiGLUBackward writes da = g·b·silu'(a) and db = g·silu(a), with g·b and
// silu(a) rounded to float32 first (the unfused composition's results).
func (b *Backend) SwiGLUBackward(da, db, a, bv, g backend.View) {
	n := checkFused(kSwiGLUBack, da, db, a, bv, g)
	if n == 0 {
		return
	}
	key := pkey(kSwiGLUBack)
	groups, threads := b.ewGrid(key, n)
	b.run(kSwiGLUBack, key, groups, threads, b.arg(da), b.arg(db), b.arg(a), b.arg(bv), b.arg(g),
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

// SumSquares writes Σ src² (src float32, contiguous) into the one-element
// view dst (any offset): per-block compensated partial sums, then the
// partials in block order — deterministic.
func (b *Backend) SumSquares(dst, src backend.View) {
	checkKernelDType(kSumSquares, onlyF32, dst, src)
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
	checkCount(kSumSquares, n)
	sq, add := pkey(kSumSquares, cBool(0, true)), pkey(kSumSquares, cBool(0, false))
	nb := (n + sumSqBlock - 1) / sumSqBlock
	t1 := rowThreads(min(n, sumSqBlock), 256, b.pipelineFor(sq).MaxThreads(), b.pipelineFor(sq).SIMDWidth())
	if nb == 1 {
		b.run(kSumSquares, sq, [3]int{1, 1, 1}, [3]int{t1, 1, 1}, b.arg(one), b.arg(src),
			bytesArg(sumSqParams{uint32(n), sumSqBlock}))
		return
	}
	part := b.Alloc(backend.Float32, nb)
	defer b.Free(part)
	b.run(kSumSquares+".blocks", sq, [3]int{nb, 1, 1}, [3]int{t1, 1, 1}, b.arg(backend.View{Buf: part}), b.arg(src),
		bytesArg(sumSqParams{uint32(n), sumSqBlock}))
	t2 := rowThreads(nb, 1024, b.pipelineFor(add).MaxThreads(), b.pipelineFor(add).SIMDWidth())
	b.run(kSumSquares+".total", add, [3]int{1, 1, 1}, [3]int{t2, 1, 1}, b.arg(one), b.arg(backend.View{Buf: part}),
		bytesArg(sumSqParams{uint32(nb), uint32(nb)}))
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
	if p.Step < 1 {
		panic(fmt.Sprintf("metal: %s: step %d must be ≥ 1", kAdamW, p.Step))
	}
	n := checkFused(kAdamW, param, grad, m, v)
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
	key := pkey(kAdamW)
	groups, threads := b.ewGrid(key, n)
	b.run(kAdamW, key, groups, threads, b.arg(param), b.arg(grad), b.arg(m), b.arg(v), bytesArg(ap))
}
